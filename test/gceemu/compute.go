package gceemu

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // ComputeTime's US Pacific time, on a machine without a zone database
)

// Call is one performMaintenance or reportHostAsFaulty request the Compute
// API emulator received.
type Call struct {
	// Method is "performMaintenance" or "reportHostAsFaulty".
	Method                  string
	Project, Zone, Instance string
	// Behavior, Description and Schedule are a fault report's
	// (faultReasons[0] and disruptionSchedule).
	Behavior, Description, Schedule string
	// Token is the bearer token the request carried.
	Token string
	// RequestID is the requestId query parameter, if any.
	RequestID string
	// Resource names a reservation block or sub-block a call was made on
	// (Instance is then empty), and Scope is a block call's
	// maintenanceScope.
	Resource, Scope string
	// Status is the HTTP status the emulator answered with.
	Status int
	At     time.Time
}

type computeState struct {
	calls []Call
	// delay between an accepted call and the notice turning ONGOING.
	delay time.Duration
	// denied are the IAM permissions the caller lacks: the methods that
	// need them answer 403.
	denied map[string]bool
	ops    map[string]operation
	opSeq  int
	// byRequestID remembers accepted calls by requestId, so that a retried
	// request with the same id gets the same operation.
	byRequestID map[string]string
	// boot counts Clear calls: a maintenance accepted before the VM came
	// back must not start on the VM after it.
	boot int
	// failWith, when set, makes accepted operations end with this error
	// and the maintenance not start.
	failWith string
	// slice are the other instances of this one's multi-host slice
	// (JoinSlice): a maintenance started on one starts on every one.
	slice []*Server
	// onReport runs once for each report accepted, when its operation ends
	// (SetOnReport), and reporting names the last accepted report's
	// operation: another report while it runs fails. reportFor is how
	// long a report's operation runs (SetReportDuration; 0: the
	// perform-maintenance delay).
	onReport  func(Call)
	reporting string
	reportFor time.Duration
	// reservation is the reservation sub-block the VM runs in, and its
	// peers (JoinReservation); nil for none.
	reservation *membership
}

// SetOnReport makes f run, in a goroutine of its own, once for each fault
// report accepted (a retry with the same requestId is not another), when
// its operation ends without an error: Compute Engine keeps the VM
// RUNNING through the report's operation and starts the host's repair
// within a minute after ("Report faulty host"). What it does then, the
// VM's stop and its return from the repair, is the test's to play
// (vms.Fleet.RepairOnReport).
func (s *Server) SetOnReport(f func(Call)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compute.onReport = f
}

// SetReportDuration makes the operation of every report accepted from now
// on stay RUNNING for d (Google documents "usually 10-12 minutes"); 0
// makes it run for the perform-maintenance delay, as other operations do.
func (s *Server) SetReportDuration(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compute.reportFor = d
}

// JoinSlice makes servers the instances of one multi-host TPU slice:
// starting maintenance on one instance of a multi-host slice puts every
// instance of the slice into maintenance. A performMaintenance call that
// one of them accepts makes every other one's notice no longer
// reschedulable at once, and when the maintenance begins every other one
// begins it too (its notice ONGOING from that moment, a notice of the
// slice's maintenance where it had none; maintenance-event
// TERMINATE_ON_HOST_MAINTENANCE); the call is recorded on the instance it
// was made for only.
func JoinSlice(servers ...*Server) {
	for _, s := range servers {
		s.mu.Lock()
		s.compute.slice = nil
		for _, o := range servers {
			if o != s {
				s.compute.slice = append(s.compute.slice, o)
			}
		}
		s.mu.Unlock()
	}
}

// sliceFollows plays, on every other instance of s's slice, what a call
// accepted on s does (accepted), or its maintenance beginning (begun, at
// at). It runs without s's lock: each instance takes its own.
func (s *Server) sliceFollows(others []*Server, begun bool, at time.Time) {
	for _, o := range others {
		o.mu.Lock()
		switch {
		case !begun && o.notice != nil:
			n := *o.notice
			n.CanReschedule = false
			o.notice = &n
		case begun:
			n := ScheduledNotice(at, time.Hour)
			if o.notice != nil {
				n = *o.notice
			}
			n.CanReschedule = false
			n.MaintenanceStatus = StatusOngoing
			n.WindowStartTime = at.UTC().Format(time.RFC3339)
			n.LatestWindowStartTime = n.WindowStartTime
			o.notice, o.noticeRaw = &n, nil
			o.event = EventTerminate
		}
		o.broadcastLocked()
		o.mu.Unlock()
	}
}

type operation struct {
	name string
	// kind is the operationType ("" for performMaintenance).
	kind    string
	started time.Time
	done    time.Time
	// err is the error the operation ends with ("" for success), errCode
	// its error.errors[].code (INTERNAL_ERROR when empty) and httpStatus
	// its httpErrorStatusCode (500 when zero).
	err, errCode string
	httpStatus   int
}

// SetOperationFailure makes every call accepted from now on answer with an
// operation that ends, after the perform-maintenance delay, with msg as its
// error; the maintenance then does not start and the notice can be
// rescheduled again. An empty msg ends this.
func (s *Server) SetOperationFailure(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compute.failWith = msg
}

// SetPerformMaintenanceDelay sets how long after an accepted call the notice
// turns ONGOING and maintenance-event TERMINATE_ON_HOST_MAINTENANCE.
func (s *Server) SetPerformMaintenanceDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compute.delay = d
}

// The IAM permissions of the Compute Engine methods the emulator serves.
const (
	PermissionPerformMaintenance = "compute.instances.performMaintenance"
	PermissionGetOperation       = "compute.zoneOperations.get"
	// PermissionReportHostAsFaulty is what Google's "Report faulty host"
	// page names for instances.reportHostAsFaulty: no permission of the
	// method's own name exists.
	PermissionReportHostAsFaulty = "compute.instances.update"
	PermissionGetInstance        = "compute.instances.get"
)

// SetPermissionDenied makes performMaintenance answer 403, as when the
// service account lacks compute.instances.performMaintenance.
func (s *Server) SetPermissionDenied(denied bool) { s.Deny(PermissionPerformMaintenance, denied) }

// Deny makes the method that needs permission (PermissionPerformMaintenance,
// PermissionReportHostAsFaulty or PermissionGetOperation) answer 403 while denied, as Compute Engine
// answers a service account whose roles lack it.
func (s *Server) Deny(permission string, denied bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compute.denied == nil {
		s.compute.denied = map[string]bool{}
	}
	s.compute.denied[permission] = denied
}

// forbidden answers Compute Engine's 403 for permission on resource.
func forbidden(w http.ResponseWriter, permission, resource string) {
	computeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("Required '%s' permission for '%s'", permission, resource))
}

// Calls returns the performMaintenance and reportHostAsFaulty requests
// received so far, including refused ones (see Call.Status).
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.compute.calls...)
}

// computeError writes a Google API error body.
func computeError(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	body, _ := json.Marshal(map[string]any{
		"error": map[string]any{
			"code":    status,
			"message": msg,
			"errors": []map[string]string{{
				"message": msg,
				"domain":  "global",
				"reason":  reason,
			}},
		},
	})
	_, _ = w.Write(body)
}

func (s *Server) serveCompute(w http.ResponseWriter, r *http.Request) {
	// projects/{p}/zones/{z}/instances/{i}/performMaintenance
	// projects/{p}/zones/{z}/operations/{op}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, ComputePrefix), "/")
	switch {
	case len(parts) == 7 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "instances" && parts[6] == "performMaintenance":
		if r.Method != http.MethodPost {
			computeError(w, http.StatusMethodNotAllowed, "httpMethodNotAllowed", "performMaintenance takes POST")
			return
		}
		s.performMaintenance(w, r, parts[1], parts[3], parts[5])
	case len(parts) == 7 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "instances" && parts[6] == "reportHostAsFaulty":
		if r.Method != http.MethodPost {
			computeError(w, http.StatusMethodNotAllowed, "httpMethodNotAllowed", "reportHostAsFaulty takes POST")
			return
		}
		s.reportHostAsFaulty(w, r, parts[1], parts[3], parts[5])
	case len(parts) == 11 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "reservations" && parts[6] == "reservationBlocks" &&
		parts[8] == "reservationSubBlocks" && parts[10] == "performMaintenance" && r.Method == http.MethodPost:
		s.groupMaintenance(w, r, parts[1], parts[3], SubBlock{Reservation: parts[5], Block: parts[7], SubBlock: parts[9]})
	case len(parts) == 9 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "reservations" && parts[6] == "reservationBlocks" &&
		parts[8] == "performMaintenance" && r.Method == http.MethodPost:
		s.groupMaintenance(w, r, parts[1], parts[3], SubBlock{Reservation: parts[5], Block: parts[7]})
	case len(parts) == 7 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "reservations" && parts[6] == "reservationBlocks" && r.Method == http.MethodGet:
		s.listGroups(w, r, parts[1], parts[3], SubBlock{Reservation: parts[5]})
	case len(parts) == 9 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "reservations" && parts[6] == "reservationBlocks" &&
		parts[8] == "reservationSubBlocks" && r.Method == http.MethodGet:
		s.listGroups(w, r, parts[1], parts[3], SubBlock{Reservation: parts[5], Block: parts[7]})
	case len(parts) == 6 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "instances" && r.Method == http.MethodGet:
		s.getInstance(w, r, parts[1], parts[3], parts[5])
	case len(parts) == 6 && parts[0] == "projects" && parts[2] == "zones" && parts[4] == "operations":
		if !s.authorized(r) {
			computeError(w, http.StatusUnauthorized, "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token.")
			return
		}
		s.getOperation(w, r, parts[1], parts[3], parts[5])
	default:
		computeError(w, http.StatusNotFound, "notFound", "The requested URL was not found on this server.")
	}
}

func (s *Server) authorized(r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	s.mu.Lock()
	trusted := s.trusted
	own := s.token
	s.mu.Unlock()
	if token == own {
		return true
	}
	for _, id := range trusted {
		if token == id.AccessToken() {
			return true
		}
	}
	return false
}

// Trust makes the Compute API take the token id's metadata server hands
// out, as another identity of the project: an aggregator's service
// account, whose token comes from its own metadata server (on GKE,
// Workload Identity's). It is granted every permission not denied (Deny).
func (s *Server) Trust(id *Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trusted = append(s.trusted, id)
}

// DenyOwnToken makes every call made with the VM's own token (its
// service account's) answer 403, as Compute Engine answers a node service
// account granted no Compute role: the default install, where the
// aggregator makes the calls.
func (s *Server) DenyOwnToken(denied bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ownDenied = denied
}

// lacks says whether r's caller lacks permission.
func (s *Server) lacks(r *http.Request, permission string) bool {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lacksLocked(token, permission)
}

func (s *Server) lacksLocked(token, permission string) bool {
	return s.compute.denied[permission] || s.ownDenied && token == s.token
}

func (s *Server) performMaintenance(w http.ResponseWriter, r *http.Request, project, zone, instance string) {
	s.answerCall(w, s.callOf(r, "performMaintenance", project, zone, instance), func(call Call) (int, string, string, operation) {
		return s.acceptPerformMaintenance(call, r)
	})
}

// callOf is the Call r makes of method on an instance.
func (s *Server) callOf(r *http.Request, method, project, zone, instance string) Call {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return Call{Method: method, Project: project, Zone: zone, Instance: instance, Token: token,
		RequestID: r.URL.Query().Get("requestId"), At: s.clock.Now()}
}

// resource names the instance call is made on.
func (c Call) resource() string {
	return fmt.Sprintf("projects/%s/zones/%s/instances/%s", c.Project, c.Zone, c.Instance)
}

// refusal is Compute Engine's answer to a call r makes before it looks at
// what the call asks: unauthenticated (401), or another instance than
// this VM (404); status 0 when there is none.
func (s *Server) refusal(call Call, r *http.Request) (status int, reason, msg string) {
	switch {
	case !s.authorized(r):
		return http.StatusUnauthorized, "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
	case call.Project != s.cfg.Project || call.Zone != s.cfg.Zone || call.Instance != s.cfg.Name:
		return http.StatusNotFound, "notFound", fmt.Sprintf("The resource '%s' was not found", call.resource())
	}
	return 0, "", ""
}

// deniedOrRetriedLocked answers a call whose caller lacks permission
// (403), or one that retries an accepted requestId (the same operation);
// done is false when neither.
func (s *Server) deniedOrRetriedLocked(call Call, permission string) (status int, reason, msg string, op operation, done bool) {
	if s.lacksLocked(call.Token, permission) {
		return http.StatusForbidden, "forbidden", fmt.Sprintf("Required '%s' permission for '%s'", permission, call.resource()), op, true
	}
	if name, ok := s.compute.byRequestID[call.RequestID]; ok && call.RequestID != "" {
		return http.StatusOK, "", "", s.compute.ops[name], true
	}
	return 0, "", "", op, false
}

// answerCall records call with the status accept decides, and answers
// with the operation or the error.
func (s *Server) answerCall(w http.ResponseWriter, call Call, accept func(Call) (status int, reason, msg string, op operation)) {
	status, reason, msg, op := accept(call)
	call.Status = status
	s.mu.Lock()
	s.compute.calls = append(s.compute.calls, call)
	s.mu.Unlock()
	if status != http.StatusOK {
		computeError(w, status, reason, msg)
		return
	}
	s.writeOperation(w, call.Project, call.Zone, op)
}

// acceptPerformMaintenance decides the answer and, when accepted, schedules
// the transition to ONGOING.
func (s *Server) acceptPerformMaintenance(call Call, r *http.Request) (status int, reason, msg string, op operation) {
	resource := call.resource()
	if status, reason, msg := s.refusal(call, r); status != 0 {
		return status, reason, msg, op
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if status, reason, msg, op, done := s.deniedOrRetriedLocked(call, PermissionPerformMaintenance); done {
		return status, reason, msg, op
	}
	if s.notice == nil {
		return http.StatusBadRequest, "badRequest", fmt.Sprintf("Invalid resource usage: 'There is no pending maintenance for instance %s.'", resource), op
	}
	if s.notice.MaintenanceStatus != StatusPending {
		return http.StatusBadRequest, "badRequest", fmt.Sprintf("Invalid resource usage: 'Maintenance for instance %s is already %s.'", resource, s.notice.MaintenanceStatus), op
	}
	if !s.notice.CanReschedule {
		return http.StatusBadRequest, "badRequest", fmt.Sprintf("Invalid resource usage: 'Maintenance for instance %s cannot be rescheduled.'", resource), op
	}
	op = s.newOperationLocked("", call.RequestID)
	// The notice can no longer be rescheduled from this moment on.
	n := *s.notice
	n.CanReschedule = false
	s.notice = &n
	s.broadcastLocked()
	slice := s.compute.slice
	go s.sliceFollows(slice, false, time.Time{})
	startLocked := func() {
		go s.sliceFollows(slice, true, s.clock.Now())
		if s.notice != nil {
			n := *s.notice
			n.MaintenanceStatus = StatusOngoing
			at := s.clock.Now().UTC().Format(time.RFC3339)
			n.WindowStartTime = at
			n.LatestWindowStartTime = at
			s.notice = &n
		}
		s.event = EventTerminate
		s.broadcastLocked()
	}
	if op.err != "" {
		// The operation fails: the notice can be rescheduled again once
		// it has ended, and nothing starts.
		s.clock.AfterFunc(s.compute.delay, func() {
			go func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.notice != nil {
					n := *s.notice
					n.CanReschedule = true
					s.notice = &n
					s.broadcastLocked()
				}
			}()
		})
	} else if s.compute.delay <= 0 {
		startLocked()
	} else {
		// A fake clock runs the callback under its own lock: hand off to a
		// goroutine so that startLocked may read the clock.
		boot := s.compute.boot
		s.clock.AfterFunc(s.compute.delay, func() {
			go func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.compute.boot == boot {
					startLocked()
				}
			}()
		})
	}
	return http.StatusOK, "", "", op
}

// reportHostAsFaulty answers a fault report as Compute Engine does: the
// body must name IMMEDIATE and one fault reason with a known behavior; a
// retried request with the same requestId gets the same operation. An
// accepted report is an operation that ends after the perform-maintenance
// delay (with the operation failure set, if any); the VM's stop and
// return are the test's to play (its Node's boot ID).
func (s *Server) reportHostAsFaulty(w http.ResponseWriter, r *http.Request, project, zone, instance string) {
	call := s.callOf(r, "reportHostAsFaulty", project, zone, instance)
	var body struct {
		DisruptionSchedule string `json:"disruptionSchedule"`
		FaultReasons       []struct {
			Behavior    string `json:"behavior"`
			Description string `json:"description"`
		} `json:"faultReasons"`
	}
	decodeErr := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body)
	call.Schedule = body.DisruptionSchedule
	if len(body.FaultReasons) > 0 {
		call.Behavior, call.Description = body.FaultReasons[0].Behavior, body.FaultReasons[0].Description
	}
	s.answerCall(w, call, func(call Call) (int, string, string, operation) {
		return s.acceptReport(call, r, decodeErr, len(body.FaultReasons))
	})
}

// FaultBehaviors are the behaviors reportHostAsFaulty accepts.
var FaultBehaviors = []string{"CHIP_ERROR", "PERFORMANCE", "SILENT_DATA_CORRUPTION", "UNRECOVERABLE_GPU_ERROR"}

func (s *Server) acceptReport(call Call, r *http.Request, decodeErr error, reasons int) (status int, reason, msg string, op operation) {
	if status, reason, msg := s.refusal(call, r); status != 0 {
		return status, reason, msg, op
	}
	switch {
	case decodeErr != nil:
		return http.StatusBadRequest, "parseError", "Invalid JSON payload received. " + decodeErr.Error(), op
	case call.Schedule != "IMMEDIATE":
		return http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.disruptionSchedule': '%s'. Only IMMEDIATE is supported.", call.Schedule), op
	case reasons != 1 || !slices.Contains(FaultBehaviors, call.Behavior):
		return http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.faultReasons[0].behavior': '%s'.", call.Behavior), op
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if status, reason, msg, op, done := s.deniedOrRetriedLocked(call, PermissionReportHostAsFaulty); done {
		return status, reason, msg, op
	}
	if code, why := s.reportRefusalLocked(); code != "" {
		// Compute Engine answers with an operation that fails with the
		// code ("Troubleshoot the faulty host API").
		op = s.newOperationLocked("reportHostAsFaulty", call.RequestID)
		op.done, op.err, op.errCode, op.httpStatus = op.started, why, code, http.StatusBadRequest
		s.compute.ops[op.name] = op
		return http.StatusOK, "", "", op
	}
	op = s.newOperationLocked("reportHostAsFaulty", call.RequestID)
	if s.compute.reportFor > 0 {
		op.done = op.started.Add(s.compute.reportFor)
		s.compute.ops[op.name] = op
	}
	s.compute.reporting = op.name
	if f := s.compute.onReport; f != nil && op.err == "" {
		if d := op.done.Sub(op.started); d > 0 {
			s.clock.AfterFunc(d, func() { go f(call) })
		} else {
			go f(call)
		}
	}
	return http.StatusOK, "", "", op
}

// reportRefusalLocked is the error code, and its message, of the
// operation a report from this VM fails with ("" when it is taken):
// Google's "Report faulty host" and "Troubleshoot the faulty host API"
// take reports only from RUNNING, reservation-bound A4X Max, A4X, A4, A3
// Ultra, A3 Mega and A3 High (8 GPU) VMs, and refuse a report while
// another one's operation runs.
func (s *Server) reportRefusalLocked() (code, msg string) {
	machine := s.cfg.machineType()
	reportable := false
	for _, p := range []string{"a4x-", "a4-", "a3-ultragpu-", "a3-megagpu-", "a3-highgpu-8g"} {
		reportable = reportable || strings.HasPrefix(machine, p)
	}
	if prev, ok := s.compute.ops[s.compute.reporting]; ok && s.clock.Now().Before(prev.done) {
		return "FAILED_WITH_UNEXPECTED_STATUS", "Another report of this instance's host is in progress (operation " + prev.name + ")."
	}
	switch {
	case s.cfg.status() != "RUNNING":
		return "INSTANCE_SHOULD_BE_RUNNING", "The instance is " + s.cfg.status() + "; it must be RUNNING."
	case !reportable:
		return "MACHINE_TYPE_NOT_SUPPORTED", "The machine type " + machine + " does not support reporting a faulty host."
	case s.cfg.provisioningModel() != "RESERVATION_BOUND":
		return "INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED", "The instance was not created with the reservation-bound provisioning model."
	}
	return "", ""
}

// newOperationLocked starts an operation of kind ("" for
// performMaintenance) that ends after the perform-maintenance delay (with
// the operation failure set, if any), remembered by requestID.
func (s *Server) newOperationLocked(kind, requestID string) operation {
	now := s.clock.Now()
	s.compute.opSeq++
	op := operation{name: fmt.Sprintf("operation-%d-%s-%d", now.UnixMilli(), s.cfg.Name, s.compute.opSeq), kind: kind,
		started: now, done: now.Add(s.compute.delay), err: s.compute.failWith}
	if s.compute.ops == nil {
		s.compute.ops = map[string]operation{}
		s.compute.byRequestID = map[string]string{}
	}
	s.compute.ops[op.name] = op
	if requestID != "" {
		s.compute.byRequestID[requestID] = op.name
	}
	return op
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request, project, zone, name string) {
	s.mu.Lock()
	op, ok := s.compute.ops[name]
	s.mu.Unlock()
	denied := s.lacks(r, PermissionGetOperation)
	if denied {
		forbidden(w, PermissionGetOperation, fmt.Sprintf("projects/%s/zones/%s/operations/%s", project, zone, name))
		return
	}
	if !ok || project != s.cfg.Project || zone != s.cfg.Zone {
		computeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/operations/%s' was not found", project, zone, name))
		return
	}
	s.writeOperation(w, project, zone, op)
}

func (s *Server) writeOperation(w http.ResponseWriter, project, zone string, op operation) {
	base := s.ComputeEndpoint() + "projects/" + project
	status, progress := "RUNNING", 0
	if !s.clock.Now().Before(op.done) {
		status, progress = "DONE", 100
	}
	body := map[string]any{
		"kind":          "compute#operation",
		"id":            fmt.Sprint(op.started.UnixNano()),
		"name":          op.name,
		"zone":          base + "/zones/" + zone,
		"operationType": cmp.Or(op.kind, "performMaintenance"),
		"targetLink":    base + "/zones/" + zone + "/instances/" + s.cfg.Name,
		"targetId":      fmt.Sprint(s.cfg.ID),
		"status":        status,
		"progress":      progress,
		"insertTime":    ComputeTime(op.started),
		"startTime":     ComputeTime(op.started),
		"selfLink":      base + "/zones/" + zone + "/operations/" + op.name,
		"user":          s.cfg.ServiceAccount,
	}
	if status == "DONE" {
		body["endTime"] = ComputeTime(op.done)
		if op.err != "" {
			code := cmp.Or(op.errCode, "INTERNAL_ERROR")
			body["error"] = map[string]any{"errors": []map[string]string{{"code": code, "message": op.err}}}
			body["httpErrorStatusCode"] = cmp.Or(op.httpStatus, 500)
			body["httpErrorMessage"] = http.StatusText(cmp.Or(op.httpStatus, 500))
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(w).Encode(body)
}

// getInstance answers instances.get with what the agent reads of it: the
// VM's scheduling (its provisioning model, and a Spot VM's preemption
// notice as a Duration of seconds, as Compute Engine spells it), and its
// resource labels.
func (s *Server) getInstance(w http.ResponseWriter, r *http.Request, project, zone, instance string) {
	call := Call{Project: project, Zone: zone, Instance: instance}
	if status, reason, msg := s.refusal(call, r); status != 0 {
		computeError(w, status, reason, msg)
		return
	}
	if s.lacks(r, PermissionGetInstance) {
		forbidden(w, PermissionGetInstance, call.resource())
		return
	}
	s.mu.Lock()
	limit := s.timeLimit
	consumption, topology := s.reservationConsumptionLocked()
	vmStatus, started, upcoming := s.statusLocked(), s.started, s.upcomingAPILocked()
	s.mu.Unlock()
	model := s.cfg.provisioningModel()
	spot := model == "SPOT"
	scheduling := map[string]any{"preemptible": s.cfg.Preemptible && spot, "provisioningModel": model, "onHostMaintenance": s.cfg.onHostMaintenance(),
		"automaticRestart": !spot}
	if spot && s.cfg.PreemptionNotice > 0 {
		scheduling["preemptionNoticeDuration"] = map[string]any{"seconds": fmt.Sprint(int64(s.cfg.PreemptionNotice.Seconds()))}
	}
	base := s.ComputeEndpoint() + "projects/" + project + "/zones/" + zone
	inst := map[string]any{"kind": "compute#instance", "id": fmt.Sprint(s.cfg.ID), "name": s.cfg.Name,
		"creationTimestamp": ComputeTime(s.created), "zone": base, "machineType": base + "/machineTypes/" + s.cfg.machineType(),
		"selfLink": base + "/instances/" + s.cfg.Name, "status": vmStatus, "lastStartTimestamp": ComputeTime(started), "scheduling": scheduling}
	if len(s.cfg.Labels) > 0 {
		inst["labels"] = maps.Clone(s.cfg.Labels)
	}
	status := map[string]any{}
	if consumption != nil {
		status["reservationConsumptionInfo"] = consumption
		status["physicalHostTopology"] = topology
		inst["resourceStatus"] = status
	}
	if limit != nil {
		limit.serve(scheduling, status)
		inst["resourceStatus"] = status
	}
	if upcoming != nil {
		status["upcomingMaintenance"] = upcoming
		inst["resourceStatus"] = status
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(w).Encode(inst)
}

// provisioningModel is the VM's scheduling.provisioningModel
// (Config.ProvisioningModel).
func (c Config) provisioningModel() string {
	switch {
	case c.ProvisioningModel != "":
		return c.ProvisioningModel
	case c.Preemptible:
		return "SPOT"
	case c.TimeLimit != nil && c.TimeLimit.FlexStart:
		return "FLEX_START"
	}
	return "RESERVATION_BOUND"
}

// onHostMaintenance is the VM's host maintenance policy
// (Config.LiveMigrates).
func (c Config) onHostMaintenance() string {
	if c.LiveMigrates {
		return "MIGRATE"
	}
	return "TERMINATE"
}

func (c Config) machineType() string { return cmp.Or(c.MachineType, "a3-highgpu-8g") }

func (c Config) status() string { return cmp.Or(c.Status, "RUNNING") }

// statusLocked is the instance's status: STOPPING once a preemption
// begins to stop it, which is at once, or after its preemption notice
// (scheduling.preemptionNoticeDuration: the metadata server's preempted
// key turns TRUE that long before the stop begins); else Config.Status.
func (s *Server) statusLocked() string {
	if s.preempt && !s.clock.Now().Before(s.preemptedAt.Add(s.cfg.PreemptionNotice)) {
		return "STOPPING"
	}
	return s.cfg.status()
}

// upcomingAPILocked is the notice as instances.get spells it
// (resourceStatus.upcomingMaintenance, camelCase: the Compute Engine v1
// API description's UpcomingMaintenance); nil when none is scheduled.
func (s *Server) upcomingAPILocked() map[string]any {
	n := s.notice
	if n == nil {
		return nil
	}
	out := map[string]any{"type": n.Type, "canReschedule": n.CanReschedule, "maintenanceStatus": n.MaintenanceStatus}
	for key, v := range map[string]string{"windowStartTime": n.WindowStartTime, "windowEndTime": n.WindowEndTime, "latestWindowStartTime": n.LatestWindowStartTime} {
		if v != "" {
			out[key] = v
		}
	}
	if len(n.MaintenanceReasons) > 0 {
		out["maintenanceReasons"] = slices.Clone(n.MaintenanceReasons)
	}
	return out
}

// ComputeTime is t as Compute Engine writes its timestamps: RFC 3339 with
// milliseconds, in US Pacific time with its offset
// (2026-11-06T09:12:31.504-08:00).
func ComputeTime(t time.Time) string {
	return t.In(pacific).Format("2006-01-02T15:04:05.000Z07:00")
}

var pacific = func() *time.Location {
	if l, err := time.LoadLocation("America/Los_Angeles"); err == nil {
		return l
	}
	return time.FixedZone("PST", -8*3600)
}()

// TimeLimit is a VM's time limit: Compute Engine terminates it (stops or
// deletes it, as Action says) at End, the resourceStatus's
// terminationTimestamp, which it computes from the VM's maxRunDuration
// or terminationTime when the VM starts running.
type TimeLimit struct {
	End time.Time
	// MaxRunDuration or TerminationTime is the limit as set (one of them).
	MaxRunDuration  time.Duration
	TerminationTime time.Time
	// Action is instanceTerminationAction: "STOP" (the default) or
	// "DELETE".
	Action string
	// FlexStart: the VM's provisioning model is FLEX_START.
	FlexStart bool
}

func (l *TimeLimit) serve(scheduling, status map[string]any) {
	action := l.Action
	if action == "" {
		action = "STOP"
	}
	scheduling["instanceTerminationAction"] = action
	if l.MaxRunDuration > 0 {
		scheduling["maxRunDuration"] = map[string]any{"seconds": fmt.Sprint(int64(l.MaxRunDuration.Seconds()))}
	}
	if !l.TerminationTime.IsZero() {
		scheduling["terminationTime"] = l.TerminationTime.UTC().Format(time.RFC3339)
	}
	if l.FlexStart {
		scheduling["provisioningModel"] = "FLEX_START"
	}
	if !l.End.IsZero() {
		status["scheduling"] = map[string]any{"terminationTimestamp": ComputeTime(l.End)}
	}
}

// SetTimeLimit sets the VM's time limit (nil: none), as instances.get
// returns it from now on.
func (s *Server) SetTimeLimit(l *TimeLimit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeLimit = l
}
