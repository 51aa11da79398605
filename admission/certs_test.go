package admission_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"golang.org/x/sync/errgroup"

	"github.com/maintenance-handler/maintenance-handler/admission"
)

var testTime = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func newCerts(cs *fake.Clientset, clk *clocktesting.FakeClock) *admission.Certs {
	return &admission.Certs{
		Secrets: cs.CoreV1().Secrets("mh"), SecretName: "ca",
		Webhooks: cs.AdmissionregistrationV1().ValidatingWebhookConfigurations(), Webhook: "hooks",
		Hosts: append(admission.ServiceHosts("check", "mh"), "127.0.0.1"), Clock: clk, Logger: slog.New(slog.DiscardHandler),
	}
}

func bundle(t testing.TB, cs *fake.Clientset) []*x509.Certificate {
	t.Helper()
	c, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "hooks", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*x509.Certificate
	rest := c.Webhooks[0].ClientConfig.CABundle
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cert)
	}
}

// TestCertsKeepOneCAAndTheBundle: the first replica makes the CA, the
// second uses it; each serves a certificate the bundle verifies for the
// Service's names; near its end a serving certificate is signed again, and
// near the CA's end a new CA replaces it while the old one stays in the
// bundle.
func TestCertsKeepOneCAAndTheBundle(t *testing.T) {
	cs := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "evictions.maintenance-handler.io"}},
	})
	clk := clocktesting.NewFakeClock(testTime)
	one, two := newCerts(cs, clk), newCerts(cs, clk)
	if one.Ready() {
		t.Fatal("ready before any certificate")
	}
	for _, c := range []*admission.Certs{one, two} {
		if err := c.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	cas := bundle(t, cs)
	if len(cas) != 1 {
		t.Fatalf("bundle holds %d CAs, want 1", len(cas))
	}
	verify := func(c *admission.Certs, roots []*x509.Certificate, at time.Time) *x509.Certificate {
		t.Helper()
		cert, err := c.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		for _, r := range roots {
			pool.AddCert(r)
		}
		for _, name := range []string{"check.mh.svc", "check.mh.svc.cluster.local", "127.0.0.1"} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: at}); err != nil {
				t.Errorf("the serving certificate for %s: %v", name, err)
			}
		}
		return leaf
	}
	first := verify(one, cas, testTime)
	verify(two, cas, testTime)

	// 61 days on: the serving certificate (90 days) is signed again, by
	// the same CA.
	clk.Step(61 * 24 * time.Hour)
	if err := one.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if renewed := verify(one, cas, clk.Now()); !renewed.NotAfter.After(first.NotAfter) {
		t.Errorf("the serving certificate was not renewed 29 days before its end (%s)", first.NotAfter)
	}
	if got := bundle(t, cs); len(got) != 1 || !got[0].Equal(cas[0]) {
		t.Errorf("the bundle changed with a serving certificate's renewal")
	}

	// Nine years and a day after the CA was made: a new CA, the old one
	// kept in the bundle while it is valid, and the replicas' new
	// certificates signed by the new one.
	clk.SetTime(testTime.Add(9*365*24*time.Hour + 24*time.Hour))
	if err := two.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rotated := bundle(t, cs)
	if len(rotated) != 2 || rotated[0].Equal(cas[0]) || !rotated[1].Equal(cas[0]) {
		t.Fatalf("after the CA's renewal the bundle holds %d CAs; want the new one, then the old one", len(rotated))
	}
	verify(two, rotated[:1], clk.Now())
	if err := one.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	verify(one, rotated[:1], clk.Now())
}

// TestServeOverTLS: the check answers over TLS with the replica's
// certificate, which the bundle verifies.
func TestServeOverTLS(t *testing.T) {
	cs := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "evictions.maintenance-handler.io"}},
	})
	certs := newCerts(cs, clocktesting.NewFakeClock(time.Now()))
	ctx, cancel := context.WithCancel(context.Background())
	g, ctx := errgroup.WithContext(ctx)
	defer func() {
		cancel()
		_ = g.Wait()
	}()
	var called atomic.Bool
	addr, err := admission.Serve(ctx, g, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { called.Store(true) }), certs, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Serve keeps the certificate: the first one, and the bundle with it.
	waitReady(t, certs, cs)
	pool := x509.NewCertPool()
	for _, c := range bundle(t, cs) {
		pool.AddCert(c)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Post("https://"+addr.String()+admission.Path, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !called.Load() {
		t.Error("the check was not called at its path")
	}
}

// waitReady waits until certs has a certificate and the configuration its
// CA (Serve's first Refresh, on a goroutine of its own).
func waitReady(t testing.TB, certs *admission.Certs, cs *fake.Clientset) {
	t.Helper()
	for start := time.Now(); !certs.Ready() || len(bundle(t, cs)) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Fatal("Serve kept no certificate")
		}
	}
}
