package service

import (
	"context"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// Log limits: one chunk an agent ships carries at most MaxLogChunk bytes,
// the store keeps the newest MaxLogKeep bytes of each instance, and one
// read answers at most MaxLogPage bytes.
const (
	MaxLogChunk = 1 << 20
	MaxLogKeep  = 8 << 20
	MaxLogPage  = 1 << 20
)

// AppendLog appends a chunk of instance id's output, as a's agent read it
// (at most MaxLogChunk bytes); the store keeps the newest MaxLogKeep bytes.
// The instance must be on a's host, or have been on it last: output read
// after the final status report is still accepted.
func (s *Agents) AppendLog(ctx context.Context, a Actor, id string, data []byte) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if len(data) > MaxLogChunk {
		return &cloud.Error{Code: cloud.Invalid,
			Message: fmt.Sprintf("a log chunk is %d bytes long; the limit is %d", len(data), MaxLogChunk),
			Details: map[string]any{"limit": MaxLogChunk}}
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if cloud.IsNotFound(err) {
			return NotFound("instance", id)
		}
		if err != nil {
			return err
		}
		if in.HostID != a.HostID {
			last := ""
			if in.HostID == "" {
				if last, err = lastHost(ctx, tx, in.ID); err != nil {
					return err
				}
			}
			if last != a.HostID {
				return NotFound("instance", id)
			}
		}
		_, err = tx.AppendLog(ctx, in.ID, data, MaxLogKeep)
		return err
	})
}

// Logs reads at most MaxLogPage bytes of the output of an instance a may
// see (another tenant's answers NotFound, like a missing one), from byte
// offset on, or from the oldest byte kept when the output there was
// dropped to keep the log under its cap.
func (s *Agents) Logs(ctx context.Context, a Actor, id string, offset int64) (*cloud.LogChunk, error) {
	if offset < 0 {
		return nil, Field("offset", "must be a byte offset (a non-negative integer), got %d", offset)
	}
	var c *cloud.LogChunk
	err := s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", id, tx.GetInstance)
		if err != nil {
			return err
		}
		c, err = tx.ReadLog(ctx, in.ID, offset, MaxLogPage)
		if cloud.ErrorCode(err) == cloud.Invalid {
			return Field("offset", "%d is past the end of the log; ask for the offset the previous page gave", offset)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// MaxMetricSkew is how far in the future a metric sample's time may lie
// (the agent's clock runs ahead of the server's); ReportMetrics records a
// sample further ahead at the server's time instead.
const MaxMetricSkew = time.Minute

// ReportMetrics records the utilization samples a's agent took of the
// instances on its host, as cloud.MetricPoints (gpu_utilization and
// cpu_utilization, with the instance's tenant and group), all in one
// transaction: the whole report is written or none of it.
//
// A report is refused, and nothing of it written, when a sample names an
// instance that is not on a's host: a missing instance and another host's
// answer the same NotFound (as the other agent routes do), whose details
// carry the instance's "id" and the sample's "field", so that an agent
// whose instance just left can send the rest again. A sample needs an
// instance ID, a time and at least one value; values must be finite and in
// [0, 1]. When the report says when it was sent (SentAt), every sample's
// time is shifted by the server's now less SentAt, which corrects an agent
// clock that is off in either direction (a slow one would otherwise make
// fresh samples look stale to the group controller). Times still more than
// MaxMetricSkew ahead of the server's clock are clamped to the server's
// now rather than refused, so that no point lands in the future, where it
// would confuse readers that page by time. A time that lies, after the
// correction, more than MetricMaxAge before the server's clock (the limit
// of custom metrics too) is invalid_argument: an agent sends its samples
// as it takes them, so such a time is a clock or a report gone wrong, and
// one far enough back is not even a time the store can keep. An empty
// report writes nothing.
func (s *Agents) ReportMetrics(ctx context.Context, a Actor, rep agentapi.MetricsReport) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if err := checkMetrics(rep); err != nil {
		return err
	}
	if len(rep.Samples) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		now := s.now()
		ins := map[string]*cloud.Instance{}
		points := make([]cloud.MetricPoint, 0, 2*len(rep.Samples))
		for i, smp := range rep.Samples {
			in := ins[smp.InstanceID]
			if in == nil {
				got, err := tx.GetInstance(ctx, smp.InstanceID)
				if err != nil && !cloud.IsNotFound(err) {
					return err
				}
				if err != nil || got.HostID != a.HostID {
					return notOnHost(smp.InstanceID, fmt.Sprintf("samples[%d].instance_id", i))
				}
				in, ins[smp.InstanceID] = got, got
			}
			at := smp.At.UTC()
			if !rep.SentAt.IsZero() {
				at = at.Add(now.Sub(rep.SentAt))
			}
			if at.After(now.Add(MaxMetricSkew)) {
				at = now.UTC()
			}
			if at.Before(now.Add(-MetricMaxAge)) {
				return Field(fmt.Sprintf("samples[%d].at", i), "%s (after the sent_at correction) is more than %s before the server's clock; send samples as they are taken",
					at.Format(time.RFC3339), MetricMaxAge)
			}
			var mem *float64
			if smp.GPUMemoryUsedBytes != nil {
				mem = new(float64(*smp.GPUMemoryUsedBytes))
			}
			for _, m := range []struct {
				name string
				v    *float64
			}{{cloud.MetricGPUUtilization, smp.GPUUtilization}, {cloud.MetricCPUUtilization, smp.CPUUtilization},
				{cloud.MetricGPUMemoryUsed, mem}} {
				if m.v != nil {
					points = append(points, cloud.MetricPoint{TenantID: in.TenantID, Name: m.name,
						InstanceID: in.ID, GroupID: in.GroupID, At: at, Value: *m.v})
				}
			}
		}
		return tx.AppendMetrics(ctx, points)
	})
}

// notOnHost is the NotFound of an instance an agent named that is not on
// its host, with the request field that named it.
func notOnHost(id, field string) error {
	err := NotFound("instance", id).(*cloud.Error)
	err.Message += " on this host"
	err.Details["field"] = field
	return err
}

// MaxGPUMemoryBytes bounds a reported GPU memory figure: 64 GPUs of
// 1 TiB, far above any host.
const MaxGPUMemoryBytes = 64 << 40

// checkMetrics validates a metrics report before any read.
func checkMetrics(rep agentapi.MetricsReport) error {
	if n := len(rep.Samples); n > agentapi.MaxMetricSamples {
		return Field("samples", "%d samples; the limit is %d per report", n, agentapi.MaxMetricSamples)
	}
	for i, smp := range rep.Samples {
		name := fmt.Sprintf("samples[%d]", i)
		if smp.InstanceID == "" {
			return Field(name+".instance_id", "is required")
		}
		if smp.At.IsZero() {
			return Field(name+".at", "is required")
		}
		if smp.GPUUtilization == nil && smp.CPUUtilization == nil && smp.GPUMemoryUsedBytes == nil {
			return Field(name, "has none of gpu_utilization, cpu_utilization and gpu_memory_used_bytes")
		}
		if m := smp.GPUMemoryUsedBytes; m != nil && *m > MaxGPUMemoryBytes {
			return Field(name+".gpu_memory_used_bytes", "%d bytes is more than any host's GPUs hold (%d)", *m, uint64(MaxGPUMemoryBytes))
		}
		for _, f := range []struct {
			field string
			v     *float64
		}{{"gpu_utilization", smp.GPUUtilization}, {"cpu_utilization", smp.CPUUtilization}} {
			if f.v != nil && !(*f.v >= 0 && *f.v <= 1) { // NaN fails both
				return Field(name+"."+f.field, "%v is not a utilization: want a number from 0 to 1", *f.v)
			}
		}
	}
	return nil
}
