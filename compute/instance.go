package compute

// What the agent reads of its own VM with instances.get: a Spot VM's
// preemption notice.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// durationJSON is a google.protobuf.Duration as the Compute API's JSON
// spells it: seconds as a string (an int64), nanos as a number.
type durationJSON struct {
	Seconds json.Number `json:"seconds"`
	Nanos   int64       `json:"nanos"`
}

// PreemptionNotice reads inst's scheduling with instances.get: whether it
// is a Spot (or preemptible) VM, and its preemptionNoticeDuration (zero
// when it has none). A 403 is ErrPermissionDenied naming GetPermission.
func (m *Maintainer) PreemptionNotice(ctx context.Context, inst Instance) (spot bool, notice time.Duration, err error) {
	return m.preemptionNotice(ctx, inst, "")
}

func (m *Maintainer) preemptionNotice(ctx context.Context, inst Instance, account string) (bool, time.Duration, error) {
	if account == "" {
		account = m.opts.ServiceAccount
	}
	var got struct {
		Scheduling struct {
			Preemptible              bool          `json:"preemptible"`
			ProvisioningModel        string        `json:"provisioningModel"`
			PreemptionNoticeDuration *durationJSON `json:"preemptionNoticeDuration"`
		} `json:"scheduling"`
	}
	for attempt := 1; ; attempt++ {
		err := m.getJSON(ctx, instancePath(inst), &got)
		if err == nil {
			break
		}
		var aerr *apiError
		switch {
		case isForbidden(err):
			return false, 0, fmt.Errorf("instances.get on %s: %w: %s lacks the IAM permission %s: %v", inst, ErrPermissionDenied, account, GetPermission, err)
		case errors.As(err, &aerr) && aerr.Code != http.StatusTooManyRequests && aerr.Code < 500 && aerr.Code != http.StatusUnauthorized:
			return false, 0, fmt.Errorf("instances.get on %s: %w", inst, err)
		case ctx.Err() != nil:
			return false, 0, fmt.Errorf("instances.get on %s: gave up after %d attempts: %w", inst, attempt, err)
		}
		if err := m.sleep(ctx, m.opts.Backoff.Delay(attempt)); err != nil {
			return false, 0, fmt.Errorf("instances.get on %s: gave up after %d attempts: %w", inst, attempt, err)
		}
	}
	sc := got.Scheduling
	spot := sc.Preemptible || sc.ProvisioningModel == "SPOT"
	if !spot || sc.PreemptionNoticeDuration == nil {
		return spot, 0, nil
	}
	secs, err := sc.PreemptionNoticeDuration.Seconds.Int64()
	if err != nil || secs < 0 || secs > 3600 {
		return spot, 0, fmt.Errorf("instances.get on %s: preemptionNoticeDuration %q is not a duration this agent believes", inst, sc.PreemptionNoticeDuration.Seconds)
	}
	return spot, time.Duration(secs)*time.Second + time.Duration(sc.PreemptionNoticeDuration.Nanos), nil
}

// getJSON reads path from the Compute API into into.
func (m *Maintainer) getJSON(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.endpoint+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{Code: resp.StatusCode, Message: strings.TrimSpace(string(body))}
	}
	return json.Unmarshal(body, into)
}
