package stack

import (
	"slices"
	"strings"
	"testing"
)

func TestBlueprints(t *testing.T) {
	list := Blueprints()
	var names []string
	for _, bp := range list {
		names = append(names, bp.Name)
		if bp.Description == "" {
			t.Errorf("%s has no description", bp.Name)
		}
	}
	if !slices.Equal(names, []string{"hparam-sweep", "llm-finetune", "sd-inference"}) {
		t.Fatalf("blueprints %v", names)
	}
	for _, name := range names {
		src, err := Blueprint(name)
		if err != nil {
			t.Fatal(err)
		}
		b := bindSrc(t, string(src), nil)
		p := planOf(t, b, nil, nil)
		if p.Summary[ActionCreate] != len(b.Copies) || len(b.Copies) == 0 {
			t.Errorf("%s: plan %v for %d copies", name, p.Summary, len(b.Copies))
		}
		cloud := &fakeCloud{}
		s := cloud.apply(t, b, nil, p)
		if _, err := b.Outputs(s.Attrs()); err != nil {
			t.Errorf("%s: outputs: %v", name, err)
		}
	}
	if _, err := Blueprint("nope"); err == nil || !strings.Contains(err.Error(), "the blueprints are hparam-sweep, llm-finetune, sd-inference") {
		t.Errorf("unknown blueprint: %v", err)
	}
	if _, err := Blueprint("../blueprints/llm-finetune"); err == nil {
		t.Error("a path is a blueprint name")
	}
}

func TestBlueprintLLMFinetune(t *testing.T) {
	src, _ := Blueprint("llm-finetune")
	b := bindSrc(t, string(src), map[string]string{"nodes": "4"})
	if got := b.Count("workers"); got != 3 {
		t.Errorf("workers = %d, want nodes-1 = 3", got)
	}
	attrs := func(a, attr string) (any, bool) { return a + "." + attr, true }
	head, err := b.Resolve("head", attrs)
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(head["labels"], []any{"driver>=550", "interconnect=infiniband"}) || head["placement_group"] != "pg.id" ||
		!Equal(head["volumes"], []any{"checkpoints.id"}) || head["offering"] != "h100.8x" {
		t.Errorf("head %v", head)
	}
	cmd := head["command"].([]any)[2].(string)
	for _, want := range []string{`--master_addr="${MASTER_ADDR:-127.0.0.1}"`, `--nnodes="$NNODES"`, `--node_rank="$NODE_RANK"`, `--master_port="$MASTER_PORT"`, "${GPUCLOUD_VOLUMES%%:*}"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command %q lacks %s", cmd, want)
		}
	}
	w, err := b.Resolve("workers[2]", attrs)
	if err != nil || w["name"] != "llm-worker-2" || w["volumes"] != "checkpoints.shared_ids" || w["env"].(map[string]any)["MASTER_ADDR"] != "head.private_address" {
		t.Errorf("workers[2] = %v, %v", w, err)
	}
	if one := bindSrc(t, string(src), map[string]string{"nodes": "1"}); one.Count("workers") != 0 {
		t.Errorf("one node has %d workers", one.Count("workers"))
	}
	if head["subnet"] != "subnet.id" || !Equal(head["security_groups"], []any{"rendezvous.id"}) ||
		w["subnet"] != "subnet.id" || !Equal(w["security_groups"], []any{"rendezvous.id"}) {
		t.Errorf("the nodes' network: head %v %v, worker %v %v", head["subnet"], head["security_groups"], w["subnet"], w["security_groups"])
	}
	sub, err := b.Resolve("subnet", attrs)
	if err != nil || sub["network"] != "net.id" || sub["cidr"] != "10.42.0.0/20" || sub["zone"] != "local-a" {
		t.Errorf("subnet %v, %v", sub, err)
	}
	sg, err := b.Resolve("rendezvous", attrs)
	if err != nil {
		t.Fatal(err)
	}
	wantIngress := []any{
		map[string]any{"protocol": "tcp", "from_port": int64(29500), "to_port": int64(29500), "group": "self", "description": "torchrun rendezvous (MASTER_PORT)"},
		map[string]any{"protocol": "all", "group": "self", "description": "NCCL bootstrap and transport, on ports chosen at run time"},
	}
	if sg["network"] != "net.id" || !Equal(sg["ingress"], wantIngress) || sg["egress"] != nil ||
		!strings.Contains(sg["description"].(string), "29500") {
		t.Errorf("rendezvous %v", sg)
	}
	d := PlanDestroy(new(fakeCloud).apply(t, b, nil, planOf(t, b, nil, nil)))
	pos := map[string]int{}
	for i, c := range d.Changes {
		pos[c.Address] = i
	}
	// Every node goes before the group and the subnet it is in, and they
	// before the network.
	for _, before := range [][2]string{{"head", "rendezvous"}, {"workers[2]", "rendezvous"}, {"head", "subnet"},
		{"workers[0]", "subnet"}, {"rendezvous", "net"}, {"subnet", "net"}, {"head", "pg"}, {"head", "checkpoints"}} {
		if pos[before[0]] > pos[before[1]] {
			t.Errorf("destroy order %s: %s after %s", actions(d), before[0], before[1])
		}
	}
	if d.Summary[ActionRetain] != 1 || d.Changes[pos["checkpoints"]].Action != ActionRetain {
		t.Errorf("checkpoints should be retained: %s", actions(d))
	}
	custom := bindSrc(t, string(src), map[string]string{"cidr": "10.7.0.0/16", "subnet_cidr": "10.7.16.0/20", "zone": "z1", "network": "ft-2"})
	n, _ := custom.Resolve("net", attrs)
	s, _ := custom.Resolve("subnet", attrs)
	if n["name"] != "ft-2" || n["cidr"] != "10.7.0.0/16" || s["cidr"] != "10.7.16.0/20" || s["zone"] != "z1" {
		t.Errorf("network parameters: net %v, subnet %v", n, s)
	}
	if _, err := mustParse(t, string(src)).Bind(map[string]string{"network": "Not_A_Label"}); err == nil {
		t.Error("network accepts a name that is not a DNS label")
	}
	for kind, params := range map[string]map[string]string{"block": nil, "shared": {"checkpoint_kind": "shared"}} {
		ck, err := bindSrc(t, string(src), params).Resolve("checkpoints", attrs)
		if err != nil || ck["kind"] != kind {
			t.Errorf("checkpoints with %v: %v, %v; want kind %s", params, ck, err, kind)
		}
	}
	if _, err := mustParse(t, string(src)).Bind(map[string]string{"checkpoint_kind": "tape"}); err == nil {
		t.Error("checkpoint_kind accepts tape")
	}
}

func TestBlueprintSweep(t *testing.T) {
	src, _ := Blueprint("hparam-sweep")
	b := bindSrc(t, string(src), map[string]string{"trials": "3", "max_price": "1.75"})
	p, err := b.Resolve("trial[2]", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p["type"] != "persistent" || p["max_price"] != "1.75" || !Equal(p["command"], []any{"python", "sweep.py", "--trial=2", "--trials=3"}) {
		t.Errorf("trial[2] = %v", p)
	}
	if _, err := mustParse(t, string(src)).Bind(map[string]string{"max_price": "cheap"}); err == nil {
		t.Error("max_price accepts words")
	}
}

func TestBlueprintInference(t *testing.T) {
	src, _ := Blueprint("sd-inference")
	b := bindSrc(t, string(src), map[string]string{"offerings": "l4.shared.0.25", "max": "3", "spot": "true"})
	p, err := b.Resolve("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := p["template"].(map[string]any)
	if !Equal(tmpl["offerings"], []any{"l4.shared.0.25"}) || p["max"] != int64(3) || p["mixed"].(map[string]any)["spot"] != true {
		t.Errorf("serve = %v", p)
	}
	pol := p["policies"].([]any)[0].(map[string]any)
	if pol["metric"] != "gpu_utilization" || pol["target"] != 0.6 || pol["type"] != "target" {
		t.Errorf("policy %v", pol)
	}
}
