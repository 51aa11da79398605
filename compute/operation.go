package compute

// Following an operation: the zonal Operation a call returned, read until
// it is DONE.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// operation is the part of a zonal Operation the agent reads.
type operation struct {
	Name   string `json:"name"`
	Status string `json:"status"` // PENDING, RUNNING, DONE
	// EndTime is when a DONE operation ended (RFC 3339).
	EndTime string `json:"endTime"`
	Error   *struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	} `json:"error"`
}

// ErrOperationFailed: the operation Compute Engine returned for an
// accepted call ended with an error.
var ErrOperationFailed = errors.New("operation failed")

// operationPoll is the time between two reads of a running operation.
const operationPoll = 10 * time.Second

// WaitOperation reads inst's zonal operation name until it is DONE and
// returns when it ended (its endTime; the time it was read DONE where it
// gives none) and nil, or ErrOperationFailed with Compute Engine's errors.
// Failed reads are retried until ctx ends, but for a 403:
// ErrPermissionDenied, naming OperationPermission, at once.
func (m *Maintainer) WaitOperation(ctx context.Context, inst Instance, name string) (time.Time, error) {
	return m.waitOperation(ctx, inst, name, "")
}

// waitOperation is WaitOperation; account, when set, names the caller in a
// permission error instead of Options.ServiceAccount.
func (m *Maintainer) waitOperation(ctx context.Context, inst Instance, name, account string) (time.Time, error) {
	if account == "" {
		account = m.opts.ServiceAccount
	}
	path := "projects/" + url.PathEscape(inst.Project) + "/zones/" + url.PathEscape(inst.Zone) + "/operations/" + url.PathEscape(name)
	failures := 0
	for {
		op, err := m.call(ctx, http.MethodGet, path, nil, nil)
		delay := operationPoll
		switch {
		case err != nil && ctx.Err() != nil:
			return time.Time{}, fmt.Errorf("wait for operation %s on %s: %w", name, inst, err)
		case isForbidden(err):
			// No retry turns a missing permission into one.
			return time.Time{}, fmt.Errorf("wait for operation %s on %s: %w: %s lacks the IAM permission %s: %v",
				name, inst, ErrPermissionDenied, account, OperationPermission, err)
		case err != nil:
			failures++
			delay = m.opts.Backoff.Delay(failures)
			m.opts.Logger.Warn("reading the operation failed; retrying", "operation", name, "err", err, "retry_in", delay)
		case op.Status == "DONE" && op.Error != nil && len(op.Error.Errors) > 0:
			msgs := make([]string, 0, len(op.Error.Errors))
			for _, e := range op.Error.Errors {
				msgs = append(msgs, e.Code+": "+e.Message)
			}
			return op.ended(m.opts.Clock.Now()), fmt.Errorf("operation %s on %s: %w: %s", name, inst, ErrOperationFailed, strings.Join(msgs, "; "))
		case op.Status == "DONE":
			return op.ended(m.opts.Clock.Now()), nil
		default:
			failures = 0
		}
		if err := m.sleep(ctx, delay); err != nil {
			return time.Time{}, fmt.Errorf("wait for operation %s on %s: %w", name, inst, err)
		}
	}
}

// ended is when op ended: its endTime, or read (now) where it has none
// that can be read.
func (op *operation) ended(read time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, op.EndTime); err == nil {
		return t
	}
	return read
}
