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
// certificate in g until ctx ends. It returns the address it listens on.
func Serve(ctx context.Context, g *errgroup.Group, addr string, check http.Handler, certs *Certs) (net.Addr, error) {
	mux := http.NewServeMux()
	mux.Handle(Path, check)
	return cli.ServeTLS(ctx, g, addr, mux, &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12})
}
