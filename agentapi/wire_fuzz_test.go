package agentapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// wireTypes are the protocol's bodies, each with one real example: what
// the agent sends (the server decodes it strictly, unknown fields
// refused) and what the server answers (the agent's client decodes it
// with encoding/json's defaults).
var wireTypes = []struct {
	name string
	new  func() any
	seed string
}{
	{"JoinRequest", func() any { return new(JoinRequest) },
		`{"join_token":"gpc_tk-1_s","inventory":{"host":{"id":"h-1","zone":"zone-a","rack":"r1","labels":{"gpu-direct":"true"},` +
			`"cpu_milli":64000,"memory_mib":262144,"gpus":[{"index":0,"uuid":"GPU-0","model":"H100","memory_mib":81920,"island":0,"mig":true,` +
			`"instances":[{"profile_id":9,"start":0}]}]},"driver":"550.54.15","cuda":"12.4",` +
			`"health":[{"index":0,"uuid":"GPU-0","healthy":false,"reason":"xid 79","utilization_pct":40,"memory_used_mib":1024}]},` +
			`"csr":"-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"}`},
	{"JoinResponse", func() any { return new(JoinResponse) },
		`{"host_id":"h-1","credential":"gpc_tk-2_secret","certificate":"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}`},
	{"HeartbeatRequest", func() any { return new(HeartbeatRequest) }, `{"inventory":{"host":{"id":"h-1"},"driver":"","cuda":"","health":null}}`},
	{"AssignmentList", func() any { return new(AssignmentList) },
		`{"assignments":[{"instance_id":"i-1","tenant_id":"tn-1","offering":"h100.mig.3g.40gb","desired":"run",` +
			`"placement":{"id":"i-1","host_id":"h-1","devices":[{"kind":"mig","gpu":0,"mig_profile_id":9,"mig_start":4}]},` +
			`"command":["python","train.py"],"env":{"HF_TOKEN":"x"},"volumes":["v-1"],"tags":{"team":"ml"},"grace_seconds":30,` +
			`"interruption":{"action":"terminate","reason":"capacity","noticed_at":"2025-03-01T12:00:00Z","deadline":"2025-03-01T12:02:00Z","for":"i-2"},` +
			`"market":"spot","spot_request_id":"sr-1","scale_in":{"protected":true,"lock":{"reason":"saving","at":"2025-03-01T12:00:00+01:00"}},` +
			`"stack":{"name":"llm","resource":"worker","rank":1,"world_size":2,"peers":[{"rank":0,"instance_id":"i-0","address":"10.0.0.2"},` +
			`{"rank":1,"instance_id":"i-1"}],"env":{"MASTER_ADDR":"10.0.0.2","MASTER_PORT":"29500","NNODES":"2","NODE_RANK":"1","RANK":"1","WORLD_SIZE":"2"}}}]}`},
	{"StatusReport", func() any { return new(StatusReport) }, `{"phase":"exited","exit_code":137,"message":"killed"}`},
	{"MetricsReport", func() any { return new(MetricsReport) },
		`{"samples":[{"instance_id":"i-1","at":"2025-03-01T11:59:30.123456789Z","gpu_utilization":0.5,"cpu_utilization":0,"gpu_memory_used_bytes":1073741824}],"sent_at":"2025-03-01T12:00:00-07:00"}`},
	{"LockRequest", func() any { return new(LockRequest) }, `{"locked":true,"reason":"saving step 1200"}`},
	{"Inventory", func() any { return new(Inventory) }, `{"host":{"id":"h-1","gpus":[]},"health":[]}`},
	{"RunningReport", func() any { return new(StatusReport) }, `{"phase":"running","devices":["GPU-0"],"private_address":"10.240.0.5"}`},
}

// FuzzWire decodes the protocol's bodies (wireTypes). Whatever the
// server's strict decoder accepts, the agent's lenient one accepts as the
// same value; and every decoded value encodes (json.Marshal, as both
// clients send) to JSON that the strict decoder accepts again as the same
// value, so that neither side can send what the other cannot read back.
func FuzzWire(f *testing.F) {
	for i, w := range wireTypes {
		f.Add(uint8(i), []byte(w.seed))
		f.Add(uint8(i), []byte(`{}`))
	}
	f.Add(uint8(0), []byte(`{"join_token":"x","unknown":1}`))
	f.Add(uint8(3), []byte(`{"assignments":[{"placement":null,"env":{"":""}}]}`))
	f.Add(uint8(5), []byte(`{"samples":[{"at":"0000-01-01T00:00:00+23:59","gpu_utilization":-0}]}`))
	f.Add(uint8(5), []byte(`{"samples":[{"at":"0000-01-01T00:00:00+24:59","gpu_utilization":-0}]}`))
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		w := wireTypes[int(kind)%len(wireTypes)]
		if v := w.new(); json.Unmarshal(data, v) == nil && zoneBeyondEncoding(v) {
			// Go's time parser takes a zone offset of 24 hours or more,
			// which its encoder refuses: no side sends one (the server
			// writes UTC, and reads a sample's time into UTC before it
			// keeps it), and nothing encodes it back.
			return
		}
		strict := w.new()
		strictErr := decodeStrict(data, strict)
		lenient := w.new()
		lenientErr := json.Unmarshal(data, lenient)
		if strictErr == nil {
			if lenientErr != nil {
				t.Fatalf("%s %q: strict decoding accepts it, the agent's refuses it: %v", w.name, data, lenientErr)
			}
			if a, b := mustMarshal(t, strict), mustMarshal(t, lenient); !bytes.Equal(a, b) {
				t.Fatalf("%s %q: strict decoding reads %s, the agent's %s", w.name, data, a, b)
			}
		}
		if lenientErr != nil {
			return
		}
		first := mustMarshal(t, lenient)
		again := w.new()
		if err := decodeStrict(first, again); err != nil {
			t.Fatalf("%s %q encodes as %s, which the server refuses: %v", w.name, data, first, err)
		}
		if second := mustMarshal(t, again); !bytes.Equal(first, second) {
			t.Fatalf("%s %q encodes as %s, which decodes and encodes as %s", w.name, data, first, second)
		}
	})
}

// decodeStrict decodes one JSON value as the server does: unknown fields
// and trailing data refused.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if err := dec.Decode(&json.RawMessage{}); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// zoneBeyondEncoding reports whether v decoded a time that json.Marshal
// refuses for its zone offset.
func zoneBeyondEncoding(v any) bool {
	_, err := json.Marshal(v)
	var me *json.MarshalerError
	return errors.As(err, &me) && strings.Contains(err.Error(), "timezone hour outside of range")
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %#v: %v", v, err)
	}
	return b
}
