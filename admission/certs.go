package admission

// The check's serving certificate: a CA in a Secret, a certificate each
// replica signs for itself, and the CA in the webhook configuration.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
)

// Lifetimes. The CA lasts ten years and is replaced once less than a year
// is left; a replica's serving certificate lasts 90 days and is signed
// again 30 days before it ends. Recheck is how often a replica looks again
// (its certificate's age, the Secret, the configuration's caBundle).
const (
	caLife    = 10 * 365 * 24 * time.Hour
	caRenew   = 365 * 24 * time.Hour
	leafLife  = 90 * 24 * time.Hour
	leafRenew = 30 * 24 * time.Hour
	Recheck   = 5 * time.Minute
)

// The Secret's keys.
const (
	keyCACert     = "ca.crt"
	keyCAKey      = "ca.key"
	keyPreviousCA = "previous-ca.crt"
)

// Secrets reads and writes the CA's Secret (a namespaced typed client).
type Secrets interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
	Create(ctx context.Context, s *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error)
	Update(ctx context.Context, s *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error)
}

// Webhooks reads and patches the webhook configuration.
type Webhooks interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*admissionregistrationv1.ValidatingWebhookConfiguration, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error)
}

// Certs keeps one replica's serving certificate and the configuration's
// caBundle. Set the fields, then Start it; GetCertificate serves the TLS
// handshakes.
type Certs struct {
	Secrets Secrets
	// SecretName is the CA's Secret, in the Secrets' namespace.
	SecretName string
	Webhooks   Webhooks
	// Webhook is the ValidatingWebhookConfiguration whose webhooks get the
	// CA; empty: none is written (the caller's configuration names the CA
	// itself).
	Webhook string
	// Hosts are the names and addresses the serving certificate is valid
	// for: the Service's DNS names (name.namespace.svc, ...).
	Hosts  []string
	Clock  clock.Clock
	Logger *slog.Logger

	mu   sync.Mutex
	cert *tls.Certificate  // with its Leaf
	ca   *x509.Certificate // that signed cert
}

// GetCertificate is tls.Config's: the replica's current certificate.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert == nil {
		return nil, errors.New("the eviction check has no serving certificate yet")
	}
	return c.cert, nil
}

// Ready is whether the replica has a certificate to serve with.
func (c *Certs) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert != nil
}

// Start keeps the certificate and the caBundle until ctx ends: at once,
// retried with backoff until it succeeds, then every Recheck.
func (c *Certs) Start(ctx context.Context) error {
	failures := 0
	for {
		wait := Recheck
		if err := c.Refresh(ctx); err != nil {
			failures++
			wait = backoff.Default.Delay(failures)
			c.Logger.Warn("eviction check: serving certificate not kept", "err", err, "retryIn", wait)
		} else {
			failures = 0
		}
		if err := backoff.Wait(ctx, c.Clock, wait); err != nil {
			return nil
		}
	}
}

// Refresh reads the CA (creating or replacing it where it must), signs the
// replica's certificate when it has none, its CA changed or it nears its
// end, and writes the CA bundle into the configuration where it differs.
func (c *Certs) Refresh(ctx context.Context) error {
	ca, key, bundle, err := c.authority(ctx)
	if err != nil {
		return err
	}
	now := c.Clock.Now()
	c.mu.Lock()
	stale := c.cert == nil || !c.ca.Equal(ca) || !now.Before(c.cert.Leaf.NotAfter.Add(-leafRenew))
	c.mu.Unlock()
	if stale {
		cert, err := c.sign(ca, key, now)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.cert, c.ca = cert, ca
		c.mu.Unlock()
		c.Logger.Info("eviction check: serving certificate signed", "hosts", c.Hosts, "notAfter", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return c.writeBundle(ctx, bundle)
}

// authority is the CA from the Secret, made (or replaced, keeping the old
// one in the bundle while it is valid) where it is missing, unreadable or
// has less than caRenew left; another replica's write, seen as a conflict,
// is read again.
func (c *Certs) authority(ctx context.Context) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	for range 5 {
		s, err := c.Secrets.Get(ctx, c.SecretName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, nil, fmt.Errorf("read the eviction check's Secret %s: %w", c.SecretName, err)
		}
		if err != nil {
			s = nil
		}
		now := c.Clock.Now()
		if s != nil {
			if ca, key, ok := parseCA(s.Data[keyCACert], s.Data[keyCAKey]); ok && now.Before(ca.NotAfter.Add(-caRenew)) {
				return ca, key, bundleOf(s.Data, now), nil
			}
		}
		certPEM, keyPEM, err := newCA(now)
		if err != nil {
			return nil, nil, nil, err
		}
		if s == nil {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.SecretName, Labels: map[string]string{"app.kubernetes.io/name": "maintenance-handler"}}, Type: corev1.SecretTypeOpaque}
			s.Data = map[string][]byte{keyCACert: certPEM, keyCAKey: keyPEM}
			_, err = c.Secrets.Create(ctx, s, metav1.CreateOptions{})
		} else {
			previous := s.Data[keyCACert]
			if old, _, ok := parseCA(previous, s.Data[keyCAKey]); !ok || !now.Before(old.NotAfter) {
				previous = nil
			}
			s.Data = map[string][]byte{keyCACert: certPEM, keyCAKey: keyPEM}
			if previous != nil {
				s.Data[keyPreviousCA] = previous
			}
			_, err = c.Secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		switch {
		case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
			continue // another replica wrote it first: read theirs
		case err != nil:
			return nil, nil, nil, fmt.Errorf("write the eviction check's Secret %s: %w", c.SecretName, err)
		}
		c.Logger.Info("eviction check: new CA written", "secret", c.SecretName)
	}
	return nil, nil, nil, fmt.Errorf("the eviction check's Secret %s kept changing under five writes", c.SecretName)
}

// bundleOf is the CA bundle a Secret's data makes: its CA, and the
// previous one while that is still valid.
func bundleOf(data map[string][]byte, now time.Time) []byte {
	bundle := append([]byte(nil), data[keyCACert]...)
	if block, _ := pem.Decode(data[keyPreviousCA]); block != nil {
		if old, err := x509.ParseCertificate(block.Bytes); err == nil && now.Before(old.NotAfter) {
			bundle = append(bundle, data[keyPreviousCA]...)
		}
	}
	return bundle
}

// writeBundle puts bundle into every webhook of the configuration whose
// caBundle differs (one strategic merge patch, keyed by webhook name).
func (c *Certs) writeBundle(ctx context.Context, bundle []byte) error {
	if c.Webhook == "" {
		return nil
	}
	cfg, err := c.Webhooks.Get(ctx, c.Webhook, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the ValidatingWebhookConfiguration %s: %w", c.Webhook, err)
	}
	var hooks []map[string]any
	for _, w := range cfg.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			hooks = append(hooks, map[string]any{"name": w.Name, "clientConfig": map[string]any{"caBundle": bundle}})
		}
	}
	if len(hooks) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"webhooks": hooks})
	if err != nil {
		return err
	}
	if _, err := c.Webhooks.Patch(ctx, c.Webhook, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "maintenance-handler-aggregator"}); err != nil {
		return fmt.Errorf("write the CA into the ValidatingWebhookConfiguration %s: %w", c.Webhook, err)
	}
	c.Logger.Info("eviction check: CA written into the webhook configuration", "configuration", c.Webhook, "webhooks", len(hooks))
	return nil
}

// parseCA reads a CA certificate and its key; ok is false where either is
// missing or does not parse, or the key is not the certificate's.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, bool) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, false
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil || !cert.IsCA {
		return nil, nil, false
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	key, isEC := k.(*ecdsa.PrivateKey)
	if err != nil || !isEC || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, false
	}
	return cert, key, true
}

// newCA makes a CA valid from an hour before now (clocks differ) for
// caLife.
func newCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "maintenance-handler eviction check CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caLife),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign the eviction check's CA: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// sign makes the replica's serving certificate for c.Hosts, valid for
// leafLife and never past its CA.
func (c *Certs) sign(ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: c.Hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(leafLife),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ca.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	for _, h := range c.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("sign the eviction check's serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// ServiceHosts are the DNS names of Service name in namespace, as the API
// server names them when it calls a webhook.
func ServiceHosts(name, namespace string) []string {
	return []string{name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local"}
}
