package gceemu

// Every Compute API request the emulator receives, and every answer it
// gives, is held to Google's published description of Compute Engine v1
// (package computeapi). A request the description does not allow (an
// unknown method, query parameter, body field or enum value) is refused as
// Compute Engine refuses it, with a 400; either side's problems are kept,
// and StartT fails the test that started the server with them.

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/maintenance-handler/maintenance-handler/test/computeapi"
)

// Exchange is one Compute API request the emulator received and its
// answer, with what the API's description found wrong with either.
type Exchange struct {
	computeapi.Exchange
	// MethodID is the method called, such as compute.instances.get (""
	// when the request names none).
	MethodID string
	Problems []string
}

// recorder keeps what a handler writes.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// serveComputeHeld serves a Compute API request, held to the description.
func (s *Server) serveComputeHeld(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		computeError(w, http.StatusBadRequest, "parseError", "The request body could not be read.")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ex := Exchange{Exchange: computeapi.Exchange{Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, ComputePrefix), Query: r.URL.Query(), Body: body}}
	d, err := computeapi.Load()
	if err != nil {
		ex.Problems = []string{err.Error()}
		s.keep(ex)
		computeError(w, http.StatusInternalServerError, "backendError", err.Error())
		return
	}
	m, problems := d.Request(ex.Method, ex.Path, ex.Query, body)
	rec := &recorder{ResponseWriter: w}
	switch {
	case m == nil:
		computeError(rec, http.StatusNotFound, "notFound", "The requested URL was not found on this server.")
	case len(problems) > 0:
		computeError(rec, http.StatusBadRequest, "invalid", "Invalid request: "+strings.Join(problems, "; "))
	default:
		s.serveCompute(rec, r)
	}
	ex.Status, ex.Answer = rec.status, rec.body.Bytes()
	if m != nil {
		ex.MethodID = m.ID
		problems = append(problems, d.Response(m, rec.status, ex.Answer)...)
	}
	ex.Problems = problems
	s.keep(ex)
}

func (s *Server) keep(ex Exchange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exchanges = append(s.exchanges, ex)
}

// Exchanges returns every Compute API request received so far, with its
// answer and its problems.
func (s *Server) Exchanges() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Exchange(nil), s.exchanges...)
}

// Tolerate makes ContractProblems leave out the problems that contain
// substring: those of a request a test sends for Compute Engine to refuse.
func (s *Server) Tolerate(substring string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tolerated = append(s.tolerated, substring)
}

// ContractProblems is every problem the API's description found with a
// request received or an answer given so far, but those tolerated.
func (s *Server) ContractProblems() []string {
	s.mu.Lock()
	tolerated := slices.Clone(s.tolerated)
	s.mu.Unlock()
	var out []string
	for _, ex := range s.Exchanges() {
		for _, p := range ex.Problems {
			if !slices.ContainsFunc(tolerated, func(t string) bool { return strings.Contains(p, t) }) {
				out = append(out, ex.Method+" "+ex.Path+": "+p)
			}
		}
	}
	return out
}
