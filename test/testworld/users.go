package testworld

// Users of any name: the world's API server trusts client certificates its
// CA signs (--client-ca-file) and takes the user's name from the
// certificate's common name, so a test can authenticate as any name a
// real cluster's authenticator might hand the API server (a Google service
// account's email or an IAM principal on GKE, say).

import (
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ConfigForUser is a client config that authenticates as user (a client
// certificate whose common name is user, in no group), its files written
// into dir.
func (w *World) ConfigForUser(dir, user string) (*rest.Config, error) {
	id := userID(user)
	cert, key := filepath.Join(dir, id+".crt"), filepath.Join(dir, id+".key")
	if err := w.pki.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, cert, key); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(w.Config)
	cfg.BearerToken, cfg.BearerTokenFile = "", ""
	cfg.CertFile, cfg.KeyFile = cert, key
	return cfg, nil
}

// NodeWriterUser is a clientset of user, whom RBAC grants Node write (as
// NodeWriterAccount has); the grant is removed when tb ends.
func (w *World) NodeWriterUser(tb testing.TB, user string) kubernetes.Interface {
	tb.Helper()
	cfg, err := w.ConfigForUser(tb.TempDir(), user)
	if err != nil {
		tb.Fatalf("a client certificate for %s: %v", user, err)
	}
	w.grantNodeWrite(tb, Ctx(tb, time.Minute), "hostile-user-"+userID(user), rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// userID is a short name for user that is safe in file and object names.
func userID(user string) string {
	sum := sha256.Sum256([]byte(user))
	return hex.EncodeToString(sum[:6])
}
