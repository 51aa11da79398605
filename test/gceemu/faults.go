package gceemu

import (
	"net/http"
	"strings"
)

// Path prefixes for faults.
const (
	MetadataPrefix = "/computeMetadata/v1/"
	ComputePrefix  = "/compute/v1/"
)

// FaultKind is what an injected fault does to a request.
type FaultKind int

const (
	// FaultStatus answers with Fault.Status (503 when zero) and a short body.
	FaultStatus FaultKind = iota
	// FaultHang holds the request without answering until the client gives
	// up or the server closes.
	FaultHang
	// FaultDrop closes the connection without an answer.
	FaultDrop
	// FaultGarbage answers 200 with a body that is no valid value, and the
	// usual headers.
	FaultGarbage
)

// Fault is an injected failure for requests whose URL path starts with Path
// (for a metadata key: MetadataPrefix + "instance/maintenance-event").
type Fault struct {
	Path   string
	Kind   FaultKind
	Status int // for FaultStatus; 503 when zero
	// Times is how many matching requests fail; zero means every one until
	// ClearFaults.
	Times int
	// Body overrides the garbage or error body.
	Body string
}

// InjectFault adds f. Faults are matched in the order they were added.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// FaultsServed counts the requests answered by an injected fault.
func (s *Server) FaultsServed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faultsServed
}

// ClearFaults removes every injected fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// takeFault returns the first fault matching path and uses up one of its
// times.
func (s *Server) takeFault(path string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if !strings.HasPrefix(path, f.Path) {
			continue
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		s.faultsServed++
		return f
	}
	return nil
}

// apply carries out the fault; it reports whether the request is answered.
func (f *Fault) apply(w http.ResponseWriter, r *http.Request, closing <-chan struct{}) bool {
	switch f.Kind {
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-closing:
		}
		return true
	case FaultDrop:
		hj, ok := w.(http.Hijacker)
		if !ok {
			return false
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return true
	case FaultGarbage:
		body := f.Body
		if body == "" {
			body = "\x00\xff<html>garbage"
		}
		w.Header().Set("Metadata-Flavor", "Google")
		w.Header().Set("ETag", "ffffffffffffffff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(body))
		return true
	default:
		status := f.Status
		if status == 0 {
			status = http.StatusServiceUnavailable
		}
		body := f.Body
		if body == "" {
			body = http.StatusText(status)
		}
		w.Header().Set("Metadata-Flavor", "Google")
		http.Error(w, body, status)
		return true
	}
}
