package gceemu

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// Project is one Compute API endpoint for the VMs of a project, as
// compute.googleapis.com is: a request about an instance goes to that VM's
// emulator, an operation's to the emulator that made it, a reservation
// block's or sub-block's to an emulator of a VM in it. Identity is the
// metadata server of the caller that runs off the VMs (the aggregator's
// service account: on GKE, Workload Identity's): every VM added trusts its
// token (Server.Trust). The identity runs in the VMs' project and region
// (its metadata server says so), as the aggregator runs in its cluster's.
type Project struct {
	Identity *Server

	mu  sync.Mutex
	vms []*Server
	srv *httptest.Server
}

// NewProject starts a Project with an identity of its own; Close stops
// both.
func NewProject() (*Project, error) {
	p := &Project{Identity: New(Config{Name: "aggregator", ServiceAccount: "maintenance-handler-aggregator@test-project.iam.gserviceaccount.com"})}
	if err := p.Identity.Start(); err != nil {
		return nil, err
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	return p, nil
}

// Add routes the calls on s's VM to s, and has s trust the identity.
func (p *Project) Add(s *Server) {
	s.Trust(p.Identity)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.vms = append(p.vms, s)
}

// ComputeEndpoint is the base path of the project's Compute API.
func (p *Project) ComputeEndpoint() string { return p.srv.URL + ComputePrefix }

// Close stops the endpoint and the identity's metadata server (not the
// VMs' emulators).
func (p *Project) Close() {
	p.srv.Close()
	_ = p.Identity.Close()
}

func (p *Project) serve(w http.ResponseWriter, r *http.Request) {
	target := p.route(strings.Split(strings.TrimPrefix(r.URL.Path, ComputePrefix), "/"))
	if target == nil {
		computeError(w, http.StatusNotFound, "notFound", "The requested URL was not found on this server.")
		return
	}
	u, _ := url.Parse(target.URL())
	httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
}

// route picks the VM's emulator that answers the path
// (projects/P/zones/Z/...); nil for none.
func (p *Project) route(parts []string) *Server {
	if len(parts) < 6 || parts[0] != "projects" || parts[2] != "zones" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.vms {
		if s.cfg.Project != parts[1] || s.cfg.Zone != parts[3] {
			continue
		}
		switch parts[4] {
		case "instances":
			if s.cfg.Name == parts[5] {
				return s
			}
		case "operations":
			if s.hasOperation(parts[5]) {
				return s
			}
		case "reservations":
			if s.inReservation(parts) {
				return s
			}
		}
	}
	return nil
}

func (s *Server) hasOperation(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.compute.ops[name]
	return ok
}

// inReservation: the VM is in the reservation (and block, and sub-block)
// parts name: projects/P/zones/Z/reservations/R[/reservationBlocks/B[/reservationSubBlocks/S]].
func (s *Server) inReservation(parts []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.compute.reservation
	switch {
	case m == nil || m.at.Reservation != parts[5]:
		return false
	case len(parts) > 7 && parts[6] == "reservationBlocks" && parts[7] != m.at.Block:
		return false
	case len(parts) > 9 && parts[8] == "reservationSubBlocks" && parts[9] != m.at.SubBlock:
		return false
	}
	return true
}
