package admission

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/maintenance-handler/maintenance-handler/internal/cli"
)

// Serve listens on addr and serves the check at Path over TLS with certs'
// certificate, and keeps that certificate (certs.Start), in g until ctx
// ends. It returns the address it listens on. Its connections are bounded
// as cli.ServeTLS bounds them (per client address, so that no pod holding
// connections open keeps the API server's calls out); refused, if not
// nil, is told of each connection refused.
func Serve(ctx context.Context, g *errgroup.Group, addr string, check http.Handler, certs *Certs, refused func(reason string)) (net.Addr, error) {
	mux := http.NewServeMux()
	mux.Handle(Path, check)
	a, err := cli.ServeTLS(ctx, g, addr, mux, &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12}, refused)
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return certs.Start(ctx) })
	return a, nil
}
