package kube

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"
)

// Config says where the API server is and how to reach it.
type Config struct {
	// Host is the API server's URL (https://host:port, maybe with a path
	// prefix).
	Host string
	// HTTPClient carries the requests: TLS and credentials. Its Timeout
	// must be zero (watches are long).
	HTTPClient *http.Client
	// UserAgent names the caller.
	UserAgent string
	// Limiter, when set, bounds every request, watches included (several
	// clients may share one); otherwise QPS and Burst make one (zero: 5
	// and 10, as client-go).
	Limiter Waiter
	QPS     float32
	Burst   int
}

// The service account's files in a pod, and the in-cluster API server.
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// tokenReread: a projected service account token is rotated by the
	// kubelet well before it expires; it is read again at least this often.
	tokenReread = time.Minute
)

// Load is the configuration for kubeconfig: a kubeconfig file's current
// context, or, when kubeconfig is empty, $KUBECONFIG's when set, or else
// the pod's service account and the in-cluster API server
// ($KUBERNETES_SERVICE_HOST and _PORT).
//
// A kubeconfig may give the server's CA (a file or data, or
// insecure-skip-tls-verify), a client certificate and key (files or data)
// and a bearer token (or token file). Credential plugins (exec,
// auth-provider) are refused with a clear error: the binaries that load
// configuration this way run in a pod.
func Load(kubeconfig string) (Config, error) {
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if kubeconfig == "" {
		return InCluster(serviceAccountDir, os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	}
	return LoadKubeconfig(kubeconfig)
}

// InCluster is the configuration of a pod whose service account's files
// are in dir (ca.crt, token), for the API server at host:port.
func InCluster(dir, host, port string) (Config, error) {
	if host == "" || port == "" {
		return Config{}, errors.New("not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset, and no kubeconfig was given")
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return Config{}, fmt.Errorf("in-cluster configuration: %w", err)
	}
	tr, err := transport(tlsSettings{caData: ca}, &fileToken{path: filepath.Join(dir, "token"), clock: clock.RealClock{}})
	if err != nil {
		return Config{}, fmt.Errorf("in-cluster configuration: %w", err)
	}
	return Config{Host: "https://" + net.JoinHostPort(host, port), HTTPClient: &http.Client{Transport: tr}}, nil
}

// kubeconfig is what LoadKubeconfig reads of a kubeconfig file.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			TLSServerName            string `json:"tls-server-name"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			ProxyURL                 string `json:"proxy-url"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificate     string         `json:"client-certificate"`
			ClientCertificateData string         `json:"client-certificate-data"`
			ClientKey             string         `json:"client-key"`
			ClientKeyData         string         `json:"client-key-data"`
			Token                 string         `json:"token"`
			TokenFile             string         `json:"tokenFile"`
			Username              string         `json:"username"`
			Exec                  map[string]any `json:"exec"`
			AuthProvider          map[string]any `json:"auth-provider"`
		} `json:"user"`
	} `json:"users"`
}

// LoadKubeconfig is the configuration of the current context of the
// kubeconfig file at path (see Load for what it supports); relative file
// names in it are relative to its directory.
func LoadKubeconfig(path string) (Config, error) {
	fail := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("kubeconfig %s: %s", path, fmt.Sprintf(format, args...))
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return fail("%v", err)
	}
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return fail("no context %q (its current-context)", kc.CurrentContext)
	}
	dir := filepath.Dir(path)
	file := func(name string) string {
		if name == "" || filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(dir, name)
	}
	var tl tlsSettings
	var server string
	found = false
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		found = true
		cl := c.Cluster
		if cl.ProxyURL != "" {
			return fail("cluster %q: proxy-url is not supported", clusterName)
		}
		server, tl.serverName, tl.insecure = cl.Server, cl.TLSServerName, cl.InsecureSkipTLSVerify
		if tl.caData, err = fileOrData(file(cl.CertificateAuthority), cl.CertificateAuthorityData); err != nil {
			return fail("cluster %q: certificate authority: %v", clusterName, err)
		}
	}
	if !found || server == "" {
		return fail("no cluster %q with a server", clusterName)
	}
	var token tokenSource
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		us := u.User
		switch {
		case us.Exec != nil || us.AuthProvider != nil:
			return fail("user %q: credential plugins (exec, auth-provider) are not supported; use a token or a client certificate", userName)
		case us.Username != "":
			return fail("user %q: basic authentication is not supported; use a token or a client certificate", userName)
		}
		if tl.certData, err = fileOrData(file(us.ClientCertificate), us.ClientCertificateData); err != nil {
			return fail("user %q: client certificate: %v", userName, err)
		}
		if tl.keyData, err = fileOrData(file(us.ClientKey), us.ClientKeyData); err != nil {
			return fail("user %q: client key: %v", userName, err)
		}
		switch {
		case us.Token != "":
			token = staticToken(us.Token)
		case us.TokenFile != "":
			token = &fileToken{path: file(us.TokenFile), clock: clock.RealClock{}}
		}
	}
	tr, err := transport(tl, token)
	if err != nil {
		return fail("%v", err)
	}
	return Config{Host: server, HTTPClient: &http.Client{Transport: tr}}, nil
}

// fileOrData is the contents of file, or else data (base64), or nil.
func fileOrData(file, data string) ([]byte, error) {
	if file != "" {
		return os.ReadFile(file)
	}
	if data == "" {
		return nil, nil
	}
	return base64.StdEncoding.DecodeString(data)
}

// tlsSettings are a connection's TLS: the server's CA (nil: the system's
// roots), the name to verify, and a client certificate.
type tlsSettings struct {
	caData, certData, keyData []byte
	serverName                string
	insecure                  bool
}

// transport is an HTTP/2 transport with tl's TLS that authenticates with
// token, when not nil. Dead connections are found by pings (a watch on a
// connection that silently died would otherwise wait for its timeout).
func transport(tl tlsSettings, token tokenSource) (http.RoundTripper, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: tl.serverName, InsecureSkipVerify: tl.insecure} //nolint:gosec // only when the kubeconfig says so
	if len(tl.caData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(tl.caData) {
			return nil, errors.New("the certificate authority holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if len(tl.certData) > 0 || len(tl.keyData) > 0 {
		cert, err := tls.X509KeyPair(tl.certData, tl.keyData)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	var rt http.RoundTripper = &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 25,
		ForceAttemptHTTP2:   true,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	if token != nil {
		rt = &bearer{next: rt, token: token}
	}
	return rt, nil
}

// tokenSource gives the bearer token of the next request.
type tokenSource interface {
	token() (string, error)
}

type staticToken string

func (t staticToken) token() (string, error) { return string(t), nil }

// fileToken is a token file, read again after tokenReread (the kubelet
// rotates a pod's projected token in place).
type fileToken struct {
	path  string
	clock clock.Clock

	mu     sync.Mutex
	cached string
	readAt time.Time
}

func (f *fileToken) token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cached != "" && f.clock.Since(f.readAt) < tokenReread {
		return f.cached, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		if f.cached != "" {
			return f.cached, nil // the last token may still be valid
		}
		return "", fmt.Errorf("read token: %w", err)
	}
	f.cached, f.readAt = strings.TrimSpace(string(b)), f.clock.Now()
	return f.cached, nil
}

// bearer adds the token to each request that has no Authorization.
type bearer struct {
	next  http.RoundTripper
	token tokenSource
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") != "" {
		return b.next.RoundTrip(r)
	}
	t, err := b.token.token()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t)
	return b.next.RoundTrip(r)
}
