package gceemu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// Values of instance/maintenance-event.
const (
	EventNone      = "NONE"
	EventMigrate   = "MIGRATE_ON_HOST_MAINTENANCE"
	EventTerminate = "TERMINATE_ON_HOST_MAINTENANCE"
)

// Values of the notice's maintenance_status.
const (
	StatusPending = "PENDING"
	StatusOngoing = "ONGOING"
)

// NoUpcomingBody is the body the real server sends with its 503 when no
// maintenance notice has been received (docs/gce.md).
const NoUpcomingBody = `{ "error": "no notifications have been received yet, try again later" }`

// Absence selects how instance/upcoming-maintenance says "nothing scheduled".
type Absence int

const (
	// AbsentEmptyObject answers 200 with "{ }", as the official doc shows.
	AbsentEmptyObject Absence = iota
	// AbsentUnavailable answers 503 with NoUpcomingBody.
	AbsentUnavailable
	// AbsentNotFound answers 404, as on machine types without the key.
	AbsentNotFound
	// AbsentNone answers 200 with NONE (a JSON string with alt=json).
	AbsentNone
)

// Notice is an upcoming-maintenance notice, spelled as the metadata server
// spells it (snake_case).
type Notice struct {
	CanReschedule         bool             `json:"can_reschedule"`
	LatestWindowStartTime string           `json:"latest_window_start_time,omitempty"`
	MaintenanceReasons    []string         `json:"maintenance_reasons,omitempty"`
	MaintenanceStatus     string           `json:"maintenance_status"`
	Type                  string           `json:"type"`
	WindowEndTime         string           `json:"window_end_time,omitempty"`
	WindowStartTime       string           `json:"window_start_time,omitempty"`
	StartTimeWindow       *StartTimeWindow `json:"start_time_window,omitempty"`
}

// StartTimeWindow is the optional earliest/latest pair seen in real notices.
type StartTimeWindow struct {
	Earliest string `json:"earliest"`
	Latest   string `json:"latest"`
}

// ScheduledNotice returns a PENDING, SCHEDULED, reschedulable notice whose
// window starts at start and lasts d.
func ScheduledNotice(start time.Time, d time.Duration) Notice {
	return Notice{
		CanReschedule:         true,
		LatestWindowStartTime: start.UTC().Format(time.RFC3339),
		MaintenanceReasons:    []string{"PLANNED_UPDATE"},
		MaintenanceStatus:     StatusPending,
		Type:                  "SCHEDULED",
		WindowEndTime:         start.Add(d).UTC().Format(time.RFC3339),
		WindowStartTime:       start.UTC().Format(time.RFC3339),
	}
}

// RepairNotice returns a PENDING, UNSCHEDULED, reschedulable notice of a
// repair Compute Engine booked for reason (a FAILURE_* one, such as
// FAILURE_GPU), whose window starts at start and lasts d.
func RepairNotice(start time.Time, d time.Duration, reason string) Notice {
	n := ScheduledNotice(start, d)
	n.Type, n.MaintenanceReasons = "UNSCHEDULED", []string{reason}
	return n
}

// Config describes one simulated VM.
type Config struct {
	Project       string // project id, e.g. "demo-project"
	ProjectNumber int64  // numeric project id
	Zone          string // e.g. "us-central1-a"
	Name          string // instance name
	ID            uint64 // numeric instance id
	// ServiceAccount is the default service account's email.
	ServiceAccount string
	// Absence selects how "nothing scheduled" looks on upcoming-maintenance.
	Absence Absence
	// Preemptible is served at instance/scheduling/preemptible.
	Preemptible bool
	// LiveMigrates: the VM's host maintenance policy is MIGRATE, served at
	// instance/scheduling/on-host-maintenance and as instances.get's
	// scheduling.onHostMaintenance; TERMINATE otherwise, as on every
	// accelerator and Spot VM (Compute Engine's "Host maintenance
	// overview": a VM with GPUs or TPUs, or a Spot VM, must terminate).
	LiveMigrates bool
	// MachineType is the VM's machine type, as instances.get names it
	// (a3-highgpu-8g when empty).
	MachineType string
	// ProvisioningModel is instances.get's scheduling.provisioningModel:
	// STANDARD, SPOT, FLEX_START or RESERVATION_BOUND. Empty: SPOT for a
	// Preemptible VM, FLEX_START for one whose TimeLimit says so, else
	// RESERVATION_BOUND (the accelerator VMs this project maintains most
	// often run in reservations; Compute Engine takes faulty-host reports
	// only from those).
	ProvisioningModel string
	// Status is instances.get's status (RUNNING when empty).
	Status string
	// Labels are the VM's resource labels, instances.get's labels map
	// (none when empty). GKE puts goog-k8s-cluster-name and
	// goog-k8s-node-pool-name on every VM of a node pool
	// (protocol.VMResourceLabelNodePool); vms.Fleet labels its VMs so.
	Labels map[string]string
	// PreemptionNotice is a Spot VM's scheduling.preemptionNoticeDuration
	// (zero: none), which instances.get returns: preempted turns TRUE this
	// long before the soft-off.
	PreemptionNotice time.Duration
	// TimeLimit, when set, is the VM's time limit, which instances.get
	// returns (SetTimeLimit changes it).
	TimeLimit *TimeLimit
	// DefaultHang is how long a long poll without timeout_sec hangs at most;
	// zero means 300 s.
	DefaultHang time.Duration
	// NoLongPoll answers wait_for_change requests at once, as a server
	// that does not long-poll a key would.
	NoLongPoll bool
	// NoETag sends answers without an ETag header.
	NoETag bool
	// NoMaintenanceEvent answers instance/maintenance-event with 404, as
	// on VMs that do not serve it (TPU VMs): the notice turning ONGOING
	// is then the only sign that the maintenance begins.
	NoMaintenanceEvent bool
	// Clock drives hangs, token expiry and delayed transitions; nil is the
	// real clock.
	Clock clock.WithDelayedExecution
}

// Server is one simulated VM's metadata server and Compute API endpoint.
type Server struct {
	cfg   Config
	clock clock.WithDelayedExecution
	// created is when the VM was created (New), for its
	// creationTimestamp.
	created time.Time

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	epoch   int           // bumped by ResetETags
	event   string
	preempt bool
	// preemptedAt is when SetPreempted(true) was called, and started when
	// the VM last started (New, Clear): its lastStartTimestamp.
	preemptedAt, started time.Time
	notice               *Notice
	// timeLimit is the VM's time limit (Config.TimeLimit, SetTimeLimit).
	timeLimit *TimeLimit
	// noticeRaw, when set, is served verbatim instead of notice.
	noticeRaw  *string
	absence    Absence
	attributes map[string]string
	token      string
	trusted    []*Server // other identities whose tokens the Compute API takes (Trust)
	ownDenied  bool      // the VM's own token is granted nothing (DenyOwnToken)
	tokenSeq   int
	faults     []*Fault
	// faultsServed counts the requests a fault answered.
	faultsServed int
	compute      computeState
	// exchanges are the Compute API requests received, with their
	// answers and problems (contract.go).
	exchanges []Exchange
	tolerated []string

	srv       *http.Server
	listener  net.Listener
	closing   chan struct{} // closed when Close begins: hung requests end
	closeOnce sync.Once
	done      chan struct{} // closed when Serve has returned
	requests  int
	waiting   int
}

// New returns a server for cfg. Call Start to listen.
func New(cfg Config) *Server {
	if cfg.Project == "" {
		cfg.Project = "test-project"
	}
	if cfg.ProjectNumber == 0 {
		cfg.ProjectNumber = 123456789012
	}
	if cfg.Zone == "" {
		cfg.Zone = "us-central1-a"
	}
	if cfg.Name == "" {
		cfg.Name = "instance-1"
	}
	if cfg.ID == 0 {
		cfg.ID = 1000000000000000001
	}
	if cfg.ServiceAccount == "" {
		cfg.ServiceAccount = fmt.Sprintf("%d-compute@developer.gserviceaccount.com", cfg.ProjectNumber)
	}
	if cfg.DefaultHang == 0 {
		cfg.DefaultHang = 300 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Server{
		cfg:        cfg,
		created:    cfg.Clock.Now(),
		started:    cfg.Clock.Now(),
		timeLimit:  cfg.TimeLimit,
		clock:      cfg.Clock,
		changed:    make(chan struct{}),
		event:      EventNone,
		absence:    cfg.Absence,
		attributes: map[string]string{},
		closing:    make(chan struct{}),
		done:       make(chan struct{}),
	}
	s.token = s.nextTokenLocked()
	return s
}

// Start listens on a free loopback port and serves until Close.
func (s *Server) Start() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.listener = l
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(l) // returns http.ErrServerClosed on Close
	}()
	return nil
}

// Close stops serving, ending hung requests.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	s.closeOnce.Do(func() { close(s.closing) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

// Host is host:port, the value for GCE_METADATA_HOST.
func (s *Server) Host() string { return s.listener.Addr().String() }

// URL is the server's base URL, e.g. http://127.0.0.1:34567.
func (s *Server) URL() string { return "http://" + s.Host() }

// ComputeEndpoint is the base path of the emulated Compute API, for a
// client's endpoint option: URL()/compute/v1/.
func (s *Server) ComputeEndpoint() string { return s.URL() + "/compute/v1/" }

// Config returns the instance's configuration.
func (s *Server) Config() Config { return s.cfg }

// SetMaintenanceEvent sets instance/maintenance-event.
func (s *Server) SetMaintenanceEvent(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.event = v
	s.broadcastLocked()
}

// MaintenanceEvent returns the current instance/maintenance-event.
func (s *Server) MaintenanceEvent() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.event
}

// SetPreempted sets instance/preempted.
func (s *Server) SetPreempted(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v && !s.preempt {
		s.preemptedAt = s.clock.Now()
	}
	s.preempt = v
	s.broadcastLocked()
}

// ScheduleNotice publishes n on instance/upcoming-maintenance, replacing any
// notice (a reschedule is a second call).
func (s *Server) ScheduleNotice(n Notice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notice = &n
	s.noticeRaw = nil
	s.broadcastLocked()
}

// SetNoticeRaw serves body verbatim on instance/upcoming-maintenance (with
// status 200), for the quirks a parser must survive.
func (s *Server) SetNoticeRaw(body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noticeRaw = &body
	s.notice = nil
	s.broadcastLocked()
}

// SetNoticeStatus changes the status of the current notice. It reports
// false when there is none.
func (s *Server) SetNoticeStatus(status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notice == nil {
		return false
	}
	n := *s.notice
	n.MaintenanceStatus = status
	s.notice = &n
	s.broadcastLocked()
	return true
}

// Notice returns a copy of the current notice, if any.
func (s *Server) Notice() (Notice, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notice == nil {
		return Notice{}, false
	}
	return *s.notice, true
}

// ClearNotice removes the notice; the endpoint then answers as Absence says.
func (s *Server) ClearNotice() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notice = nil
	s.noticeRaw = nil
	s.broadcastLocked()
}

// SetAbsence changes how "nothing scheduled" is answered.
func (s *Server) SetAbsence(a Absence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.absence = a
	s.broadcastLocked()
}

// SetAttribute sets instance/attributes/key.
func (s *Server) SetAttribute(key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attributes[key] = value
	s.broadcastLocked()
}

// Clear puts the instance back to "no maintenance": event NONE, not
// preempted, no notice. It is what a VM sees after it comes back.
func (s *Server) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compute.boot++ // a maintenance accepted before does not start after
	s.event = EventNone
	s.preempt = false
	s.started = s.clock.Now()
	s.notice = nil
	s.noticeRaw = nil
	s.broadcastLocked()
}

// ResetETags changes every ETag without changing any value, as a metadata
// server restart would. Long polls waiting on an old ETag answer at once
// with the unchanged value.
func (s *Server) ResetETags() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	s.broadcastLocked()
}

// AccessToken returns the token the token endpoint currently hands out; the
// Compute API accepts only it.
func (s *Server) AccessToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// Requests counts the metadata requests served (after the header check).
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Waiting counts the long polls hanging right now.
func (s *Server) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

func (s *Server) nextTokenLocked() string {
	s.tokenSeq++
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", s.cfg.Name, s.tokenSeq)))
	return "ya29.emu-" + hex.EncodeToString(sum[:12])
}

// broadcastLocked wakes every waiting long poll.
func (s *Server) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// etag is 16 hex digits over the epoch and the body.
func (s *Server) etagLocked(status int, body string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%d\x00%s", s.epoch, status, body)))
	return hex.EncodeToString(sum[:8])
}

// answer is what one metadata path resolves to at one instant.
type answer struct {
	status      int
	body        string
	contentType string
}

func text(body string) answer {
	return answer{status: http.StatusOK, body: body, contentType: "application/text"}
}

func jsonAnswer(body string) answer {
	return answer{status: http.StatusOK, body: body, contentType: "application/json"}
}

var notFound = answer{status: http.StatusNotFound, body: "Not Found\n", contentType: "text/html; charset=UTF-8"}

// resolveLocked answers a metadata path (relative to /computeMetadata/v1/).
func (s *Server) resolveLocked(path string, altJSON, recursive bool) answer {
	switch path {
	case "instance/maintenance-event":
		if s.cfg.NoMaintenanceEvent {
			return notFound
		}
		return s.plainLocked(s.event, altJSON)
	case "instance/preempted":
		return s.plainLocked(boolText(s.preempt), altJSON)
	case "instance/upcoming-maintenance", "instance/upcoming-maintenance/":
		return s.upcomingLocked(altJSON)
	case "instance/name":
		return s.plainLocked(s.cfg.Name, altJSON)
	case "instance/hostname":
		return s.plainLocked(fmt.Sprintf("%s.%s.c.%s.internal", s.cfg.Name, s.cfg.Zone, s.cfg.Project), altJSON)
	case "instance/id":
		if altJSON {
			return jsonAnswer(strconv.FormatUint(s.cfg.ID, 10))
		}
		return text(strconv.FormatUint(s.cfg.ID, 10))
	case "instance/zone":
		return s.plainLocked(fmt.Sprintf("projects/%d/zones/%s", s.cfg.ProjectNumber, s.cfg.Zone), altJSON)
	case "instance/scheduling/preemptible":
		return s.plainLocked(boolText(s.cfg.Preemptible), altJSON)
	case "instance/scheduling/on-host-maintenance":
		return s.plainLocked(s.cfg.onHostMaintenance(), altJSON)
	case "instance/scheduling/automatic-restart":
		return s.plainLocked(boolText(!s.cfg.Preemptible), altJSON)
	case "project/project-id":
		return s.plainLocked(s.cfg.Project, altJSON)
	case "project/numeric-project-id":
		return text(strconv.FormatInt(s.cfg.ProjectNumber, 10))
	case "instance/service-accounts/", "instance/service-accounts":
		return text("default/\n" + s.cfg.ServiceAccount + "/\n")
	case "instance/service-accounts/default/email":
		return s.plainLocked(s.cfg.ServiceAccount, altJSON)
	case "instance/service-accounts/default/scopes":
		return text("https://www.googleapis.com/auth/cloud-platform\n")
	case "instance/service-accounts/default/token":
		body, _ := json.Marshal(map[string]any{
			"access_token": s.token,
			"expires_in":   3599,
			"token_type":   "Bearer",
		})
		return jsonAnswer(string(body))
	case "instance/attributes/", "instance/attributes":
		if recursive || altJSON {
			body, _ := json.Marshal(s.attributes)
			return jsonAnswer(string(body))
		}
		keys := make([]string, 0, len(s.attributes))
		for k := range s.attributes {
			keys = append(keys, k+"\n")
		}
		sort.Strings(keys)
		return text(strings.Join(keys, ""))
	}
	if key, ok := strings.CutPrefix(path, "instance/attributes/"); ok {
		if v, ok := s.attributes[key]; ok {
			return s.plainLocked(v, altJSON)
		}
	}
	return notFound
}

func (s *Server) plainLocked(v string, altJSON bool) answer {
	if altJSON {
		body, _ := json.Marshal(v)
		return jsonAnswer(string(body))
	}
	return text(v)
}

func (s *Server) upcomingLocked(altJSON bool) answer {
	if s.noticeRaw != nil {
		return jsonAnswer(*s.noticeRaw)
	}
	if s.notice != nil {
		body, _ := json.Marshal(s.notice)
		return jsonAnswer(string(body))
	}
	switch s.absence {
	case AbsentUnavailable:
		return answer{status: http.StatusServiceUnavailable, body: NoUpcomingBody, contentType: "application/json"}
	case AbsentNotFound:
		return notFound
	case AbsentNone:
		return s.plainLocked("NONE", altJSON)
	default:
		return jsonAnswer("{ }")
	}
}

func boolText(b bool) string {
	if b {
		return "TRUE"
	}
	return "FALSE"
}

// ServeHTTP routes metadata and Compute API requests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f := s.takeFault(r.URL.Path); f != nil {
		if f.apply(w, r, s.closing) {
			return
		}
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/computeMetadata/v1/"):
		s.serveMetadata(w, r)
	case strings.HasPrefix(r.URL.Path, ComputePrefix):
		s.serveComputeHeld(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Metadata-Flavor", "Google")
	w.Header().Set("Server", "Metadata Server for VM")
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, `Missing required header "Metadata-Flavor": "Google"`, http.StatusForbidden)
		return
	}
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Request denied: X-Forwarded-For header present", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	path := strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/")
	altJSON := q.Get("alt") == "json"
	recursive := q.Get("recursive") == "true"
	wait := q.Get("wait_for_change") == "true"
	lastETag, hasLastETag := q.Get("last_etag"), q.Has("last_etag")
	hang := s.cfg.DefaultHang
	if v := q.Get("timeout_sec"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "Invalid value for timeout_sec", http.StatusBadRequest)
			return
		}
		hang = time.Duration(n) * time.Second
	}

	s.mu.Lock()
	s.requests++
	a := s.resolveLocked(path, altJSON, recursive)
	etag := s.etagLocked(a.status, a.body)
	if wait && !s.cfg.NoLongPoll && a.status == http.StatusOK && (!hasLastETag || lastETag == etag) {
		// Hang until the ETag moves away from the one the client holds, or
		// until timeout_sec, which re-delivers the unchanged value.
		waitFor := etag
		timer := s.clock.NewTimer(hang)
		defer timer.Stop()
		s.waiting++
		defer func() {
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
		}()
		for etag == waitFor {
			ch := s.changed
			s.mu.Unlock()
			timedOut := false
			select {
			case <-ch:
			case <-timer.C():
				timedOut = true
			case <-r.Context().Done():
				return
			case <-s.closing:
				// Drop the connection: a returning handler would answer 200
				// with an empty body, which is no value the real server sends.
				panic(http.ErrAbortHandler)
			}
			s.mu.Lock()
			a = s.resolveLocked(path, altJSON, recursive)
			etag = s.etagLocked(a.status, a.body)
			if timedOut {
				break
			}
		}
	}
	s.mu.Unlock()
	if !s.cfg.NoETag {
		w.Header().Set("ETag", etag)
	}
	w.Header().Set("Content-Type", a.contentType)
	w.WriteHeader(a.status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(a.body))
	}
}

// StartT starts a server for a test and closes it when the test ends;
// the test fails if a Compute API request it received, or an answer it
// gave, is not as Google's description of the API allows
// (ContractProblems).
func StartT(t testing.TB, cfg Config) *Server {
	t.Helper()
	s := New(cfg)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		for _, p := range s.ContractProblems() {
			t.Errorf("Compute API contract, %s: %s", cfg.Name, p)
		}
	})
	return s
}
