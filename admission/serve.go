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
// ends. It returns the address it listens on.
func Serve(ctx context.Context, g *errgroup.Group, addr string, check http.Handler, certs *Certs) (net.Addr, error) {
	mux := http.NewServeMux()
	mux.Handle(Path, check)
	a, err := cli.ServeTLS(ctx, g, addr, mux, &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return certs.Start(ctx) })
	return a, nil
}
