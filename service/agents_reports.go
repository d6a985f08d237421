package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// maxReportMessage bounds the message of a status report, which becomes
// the instance's Reason.
const maxReportMessage = 1024

// Report applies what a's agent reports about instance id: reportPath maps
// the report to lifecycle moves, each made by MoveInstance with the
// agent's actor (AgentActor), all in one transaction. A move to a final state
// releases the allocation (MoveInstance clears the instance's host and
// placement) and, for terminated, detaches its volumes. The host's version
// is left alone: the scheduler sees the release in the instances it reads.
//
// A report that does not apply any more changes nothing and is no error: a
// repeated one, a late starting for a running instance, a running for an
// instance asked to stop. A report for an instance that is not on a's host
// is NotFound, except a repeat of the final report that released it from
// this host, which changes nothing, so that an agent may retry a report
// whose answer it did not get.
//
// A report's PrivateAddress (the running report's) is recorded on an
// instance made before private networks existed (one without a subnet),
// whose peers in a stack's job learn it from their assignments
// (Assignments); the address of an instance on a private network is the
// one the server gave it, and a report of another is ignored. A report's
// address must be an IP address without a zone, neither
// unspecified nor multicast (invalid_argument otherwise, before anything
// is written). Only the agent of the instance's host gets that far.
func (s *Agents) Report(ctx context.Context, a Actor, id string, rep agentapi.StatusReport) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if err := checkReport(&rep); err != nil {
		return err
	}
	host := a.HostID
	return s.tx(ctx, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if cloud.IsNotFound(err) {
			return NotFound("instance", id)
		}
		if err != nil {
			return err
		}
		if in.HostID != host {
			if in.HostID == "" && slices.Contains(finalStates(rep), in.State) {
				last, err := lastHost(ctx, tx, in.ID)
				if err != nil || last == host {
					return err
				}
			}
			return NotFound("instance", id)
		}
		path, reason := reportPath(in.State, rep, reclaimOf(in))
		now := s.now()
		devicesChanged := rep.Phase == agentapi.PhaseRunning && recordDevices(in, rep.Devices)
		// The server gave an instance on a private network its address
		// (placeOnNetwork): a report of another one is ignored.
		addressChanged := rep.PrivateAddress != "" && rep.PrivateAddress != in.PrivateAddress && in.SubnetID == ""
		if addressChanged {
			in.PrivateAddress = rep.PrivateAddress
		}
		for _, to := range path {
			m := Move{To: to, Reason: reason, Actor: AgentActor(host).ID}
			if to == cloud.Running && (rep.ImageMillis > 0 || rep.StartMillis > 0) {
				m.Details, _ = json.Marshal(RunningDetails{ImageMillis: rep.ImageMillis, StartMillis: rep.StartMillis})
			}
			if err := MoveInstance(ctx, tx, in, m, now); err != nil {
				return err
			}
		}
		if (devicesChanged || addressChanged) && len(path) == 0 {
			in.UpdatedAt = now
			return tx.UpdateInstance(ctx, in)
		}
		return nil
	})
}

// maxImageMillis bounds a reported image time: a day.
const maxImageMillis = 24 * 3600 * 1000

// checkReport validates a status report and cleans its message.
func checkReport(rep *agentapi.StatusReport) error {
	switch rep.Phase {
	case agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseStopped, agentapi.PhaseFailed:
	case agentapi.PhaseExited:
		if rep.ExitCode == nil {
			return Field("exit_code", "is required when phase is %s", agentapi.PhaseExited)
		}
	case "":
		return Field("phase", "is required")
	default:
		return Field("phase", "unknown phase %s (want %s, %s, %s, %s or %s)", Quote(rep.Phase),
			agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseExited, agentapi.PhaseStopped, agentapi.PhaseFailed)
	}
	rep.Message = cleanMessage(rep.Message)
	if rep.PrivateAddress != "" {
		addr, err := netip.ParseAddr(rep.PrivateAddress)
		if err != nil || addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast() {
			return Field("private_address", "%s is not an instance's IP address (IPv4 or IPv6, without a zone)", Quote(rep.PrivateAddress))
		}
		rep.PrivateAddress = addr.Unmap().String()
	}
	if rep.ImageMillis < 0 || rep.ImageMillis > maxImageMillis {
		return Field("image_ms", "%d is not an image's time in milliseconds (0 to %d)", rep.ImageMillis, maxImageMillis)
	}
	if rep.StartMillis < 0 || rep.StartMillis > maxImageMillis {
		return Field("start_ms", "%d is not a start's time in milliseconds (0 to %d)", rep.StartMillis, maxImageMillis)
	}
	for i, d := range rep.Devices {
		if d == "" || len(d) > agentapi.MaxDeviceUUID || strings.IndexFunc(d, func(c rune) bool { return c <= ' ' || c > '~' }) >= 0 {
			return Field(fmt.Sprintf("devices[%d]", i), "%s is not a device UUID (printable ASCII, 1 to %d characters)", Quote(d), agentapi.MaxDeviceUUID)
		}
	}
	return nil
}

// recordDevices copies the device UUIDs an agent reported (the ones its
// workload sees) into the instance's placement, in device order; a report
// whose count does not match the placement's is ignored rather than
// refused (an agent of another version). It reports whether anything
// changed.
func recordDevices(in *cloud.Instance, devices []string) bool {
	p := in.Placement
	if p == nil || len(devices) == 0 || len(devices) != len(p.Devices) {
		return false
	}
	changed := false
	for i := range p.Devices {
		if p.Devices[i].VisibleUUID != devices[i] {
			changed = true
		}
	}
	if !changed {
		return false
	}
	cp := *p
	cp.Devices = slices.Clone(p.Devices)
	for i := range cp.Devices {
		cp.Devices[i].VisibleUUID = devices[i]
	}
	in.Placement = &cp
	return true
}

// cleanMessage makes an agent's message fit for a Reason: valid UTF-8,
// control characters (newlines of a stack trace) as spaces, and cut to
// maxReportMessage bytes. Agents build messages from error strings they do
// not control, so the message is cleaned rather than refused.
func cleanMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > maxReportMessage {
		cut := maxReportMessage
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// reportPath returns the lifecycle moves a report leads to from state
// from, in order, and the reason they record. Nil means the report does
// not apply (any more): it is answered without a change. The mapping is
// StatusReport's: starting -> starting, running -> running (through
// starting if that report was missed), exited 0 -> stopped (through
// stopping), exited otherwise or failed -> failed, stopped -> stopped; an
// instance being terminated goes to terminated whatever ended it. A stopped
// report applies only while the server asked for a stop: for an instance
// that should run it can only be a late copy from an earlier run.
//
// reclaim, when not empty, is the reason of the spot reclaim that is
// stopping or terminating the instance (reclaimOf): a final report's
// reason then says the instance was reclaimed, e.g. "reclaimed
// (capacity): stopped at the notice's deadline".
func reportPath(from cloud.State, rep agentapi.StatusReport, reclaim string) ([]cloud.State, string) {
	var path []cloud.State
	var reason string
	switch rep.Phase {
	case agentapi.PhaseStarting:
		reason = "the agent is starting the workload"
		if from == cloud.Scheduled {
			path = []cloud.State{cloud.Starting}
		}
	case agentapi.PhaseRunning:
		reason = "the workload is running"
		switch from {
		case cloud.Scheduled:
			path = []cloud.State{cloud.Starting, cloud.Running}
		case cloud.Starting:
			path = []cloud.State{cloud.Running}
		}
	case agentapi.PhaseStopped:
		reason = "the agent stopped the workload"
		switch from {
		case cloud.Stopping:
			path = []cloud.State{cloud.Stopped}
		case cloud.Terminating:
			path = []cloud.State{cloud.Terminated}
		}
	case agentapi.PhaseExited, agentapi.PhaseFailed:
		target := cloud.Failed
		reason = "the agent could not start the workload"
		if rep.Phase == agentapi.PhaseExited {
			reason = "exit code " + strconv.Itoa(*rep.ExitCode)
			if *rep.ExitCode == 0 {
				target, reason = cloud.Stopped, cloud.ReasonExitedOK
			}
		}
		switch {
		case from == cloud.Terminating:
			path = []cloud.State{cloud.Terminated}
		case target == cloud.Failed && cloud.CanMove(from, cloud.Failed):
			path = []cloud.State{cloud.Failed}
		case target == cloud.Stopped && from == cloud.Stopping:
			path = []cloud.State{cloud.Stopped}
		case target == cloud.Stopped && cloud.CanMove(from, cloud.Stopping):
			path = []cloud.State{cloud.Stopping, cloud.Stopped}
		}
	}
	if rep.Message != "" {
		if rep.Phase == agentapi.PhaseFailed {
			reason = rep.Message
		} else {
			reason += ": " + rep.Message
		}
	}
	if reclaim != "" && len(path) > 0 && (from == cloud.Stopping || from == cloud.Terminating) {
		if rep.Phase == agentapi.PhaseStopped {
			reason = strings.Replace(reason, "the agent stopped the workload", "stopped at the notice's deadline", 1)
		}
		reason = "reclaimed (" + reclaim + "): " + reason
	}
	return path, reason
}

// finalStates are the states a final report (exited, stopped, failed) may
// have led to, for telling a repeated report from a stray one.
func finalStates(rep agentapi.StatusReport) []cloud.State {
	switch {
	case rep.Phase == agentapi.PhaseStopped || rep.Phase == agentapi.PhaseExited && *rep.ExitCode == 0:
		return []cloud.State{cloud.Stopped, cloud.Terminated}
	case rep.Phase == agentapi.PhaseExited || rep.Phase == agentapi.PhaseFailed:
		return []cloud.State{cloud.Failed, cloud.Terminated}
	}
	return nil
}

// lastHost returns the host an instance was last on: the host of its
// newest event that names one. Every move of an instance that holds an
// allocation names its host, so after a release this is the host that
// held it last.
func lastHost(ctx context.Context, tx cloud.Tx, instanceID string) (string, error) {
	evs, err := tx.ListEvents(ctx, cloud.EventFilter{InstanceID: instanceID})
	if err != nil {
		return "", err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].HostID != "" {
			return evs[i].HostID, nil
		}
	}
	return "", nil
}

// SetScaleInLock takes (req.Locked) or releases the completion lock of
// instance id, on behalf of its workload, which asked through its metadata
// endpoint: scale-in and idle release never pick a locked instance. Only
// the live instances on a's host may be locked; another host's, or a
// missing one, is NotFound, as on the other agent routes. The lock's time
// is the server's; the tenant's Protected flag is kept as it is. Taking a
// lock the instance already holds with the same reason, or releasing one
// it does not hold, changes nothing; any other change writes the instance
// (with its version; a write that lost a race is retried once) and an
// instance.scale_in event naming the agent. It answers the instance's
// scale-in protection as it now stands, empty when nothing holds it.
func (s *Agents) SetScaleInLock(ctx context.Context, a Actor, id string, req agentapi.LockRequest) (*cloud.ScaleIn, error) {
	if err := agentOnly(a); err != nil {
		return nil, err
	}
	if !req.Locked {
		req.Reason = ""
	}
	if err := checkPrintable("reason", req.Reason, agentapi.MaxLockReason); err != nil {
		return nil, err
	}
	var out *cloud.ScaleIn
	set := func() error {
		return s.tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, id)
			if err != nil && !cloud.IsNotFound(err) {
				return err
			}
			if err != nil || in.HostID != a.HostID || !slices.Contains(cloud.HoldingStates(), in.State) {
				return notOnHost(id, "id")
			}
			now := s.now()
			si := &cloud.ScaleIn{}
			if in.ScaleIn != nil {
				si.Protected = in.ScaleIn.Protected
				if l := in.ScaleIn.Lock; l != nil {
					si.Lock = &cloud.ScaleLock{Reason: l.Reason, At: l.At}
				}
			}
			out = si
			var why string
			switch {
			case req.Locked && si.Lock != nil && si.Lock.Reason == req.Reason:
				return nil
			case req.Locked:
				si.Lock = &cloud.ScaleLock{Reason: req.Reason, At: now.UTC()}
				why = "the workload took its completion lock"
				if req.Reason != "" {
					why += ": " + req.Reason
				}
			case si.Lock == nil:
				return nil
			default:
				si.Lock = nil
				why = "the workload released its completion lock"
			}
			in.ScaleIn = &cloud.ScaleIn{Protected: si.Protected, Lock: si.Lock}
			if !in.ScaleIn.Held() {
				in.ScaleIn = nil
			}
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
			return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventInstanceScaleIn, TenantID: in.TenantID,
				InstanceID: in.ID, HostID: in.HostID, Actor: AgentActor(a.HostID).ID, Reason: why})
		})
	}
	err := set()
	if cloud.IsConflict(err) {
		// Another writer (the API's protection, a lifecycle move) changed
		// the instance between our read and write: read it again.
		err = set()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RunningDetails are the details of an instance's move to running that
// its agent reported: how long its image took to be ready, and its whole
// start (an endpoint's cold start shows them).
type RunningDetails struct {
	ImageMillis int64 `json:"image_ms,omitempty"`
	StartMillis int64 `json:"start_ms,omitempty"`
}
