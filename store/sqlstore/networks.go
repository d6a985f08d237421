package sqlstore

import (
	"context"
	"strconv"

	"github.com/gpucloud/gpucloud/cloud"
)

// Private networks: cloud.NetworkTx. Networks, subnets and security groups
// share their shape: an ID, a tenant, a name unique in a scope (the tenant
// for networks, the network for the others), a default flag, tags, an
// idempotency key and a version. Creates insert with ON CONFLICT DO
// NOTHING and, when nothing was inserted, find out which rule the row
// broke; the transaction stays usable on both databases. Deletes remove
// the row.

// netTable describes one of the three tables.
type netTable struct {
	table, what, cols string
	// scope is the column whose rows a name is unique among, scopeWhat
	// what it refers to.
	scope, scopeWhat string
	// detail is the key of the other row's ID in a name conflict's
	// Details.
	detail string
}

var (
	networkTable = netTable{table: "networks", what: "network", cols: networkCols,
		scope: "tenant_id", scopeWhat: "tenant", detail: "network_id"}
	subnetTable = netTable{table: "subnets", what: "subnet", cols: subnetCols,
		scope: "network_id", scopeWhat: "network", detail: "subnet_id"}
	securityGroupTable = netTable{table: "security_groups", what: "security group", cols: securityGroupCols,
		scope: "network_id", scopeWhat: "network", detail: "security_group_id"}
)

// maxVNI is the largest VNI: a VXLAN network identifier has 24 bits.
const maxVNI = 1<<24 - 1

// validNet checks what every row of the three tables needs.
func validNet(k netTable, id, tenantID, name string) error {
	switch {
	case id == "":
		return invalidf("%s has no id", k.what)
	case tenantID == "":
		return invalidf("%s %s has no tenant", k.what, id)
	case name == "":
		return invalidf("%s %s has no name", k.what, id)
	}
	return nil
}

// byKey finds the row of k's table that a tenant created with an
// idempotency key; the empty key never matches.
func byKey[T any](ctx context.Context, t *tx, k netTable, scan func(scanner) (*T, error), tenantID, key string) (*T, error) {
	return one(ctx, t, "find "+k.what+" by idempotency key",
		func() error {
			return notFoundf("tenant %s has no %s with idempotency key %s", tenantID, k.what, strconv.Quote(key))
		},
		"SELECT "+k.cols+" FROM "+k.table+" WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scan)
}

// retried returns nil when key is empty or the tenant created no row of
// k's table with it. Otherwise it sets *dst to that row and returns the
// Conflict whose Details carry "existing_id".
func retried[T any](ctx context.Context, t *tx, k netTable, scan func(scanner) (*T, error), tenantID, key string,
	dst *T, idOf func(*T) string) error {
	if key == "" {
		return nil
	}
	old, err := byKey(ctx, t, k, scan, tenantID, key)
	if cloud.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	*dst = *old
	return idempotencyConflict(k.what, idOf(old), key)
}

// nameTaken returns a Conflict when a row of k's table other than id has
// name in scopeID.
func (t *tx) nameTaken(ctx context.Context, k netTable, scopeID, name, id string) error {
	var other string
	found := true
	err := t.get(ctx, "find "+k.what+" by name", func() error { found = false; return nil },
		"SELECT id FROM "+k.table+" WHERE "+k.scope+" = ? AND name = ? AND id <> ?",
		[]any{scopeID, name, id}, &other)
	if err != nil || !found {
		return err
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: k.scopeWhat + " " + scopeID + " already has a " + k.what + " named " + strconv.Quote(name) +
			" (" + other + ")",
		Details: map[string]any{"name": name, k.detail: other}}
}

// defaultTaken returns a Conflict when another default row of k's table
// matches cond (on args): of a tenant's networks, of a network's groups,
// of a network's subnets in a zone, only one is the default.
func (t *tx) defaultTaken(ctx context.Context, k netTable, id, where, cond string, args ...any) error {
	var other string
	found := true
	err := t.get(ctx, "find default "+k.what, func() error { found = false; return nil },
		"SELECT id FROM "+k.table+" WHERE "+cond+" AND is_default AND id <> ?", append(args, id), &other)
	if err != nil || !found {
		return err
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: where + " already has a default " + k.what + " (" + other + ")",
		Details: map[string]any{k.detail: other}}
}

// notInserted explains why the insert of row id into k's table, with ON
// CONFLICT DO NOTHING, inserted nothing once the caller has ruled out its
// idempotency key, name and default flag: the ID is taken, or another
// unique column is.
func (t *tx) notInserted(ctx context.Context, k netTable, id string) error {
	dup, err := t.exists(ctx, "find "+k.what+" "+id, "SELECT 1 FROM "+k.table+" WHERE id = ?", id)
	if err != nil {
		return err
	}
	if dup {
		return conflictf("%s %s already exists", k.what, id)
	}
	return conflictf("%s %s conflicts with a stored %s", k.what, id, k.what)
}

// parentNetwork returns NotFound unless network id exists and belongs to
// tenantID: a subnet or group never refers to another tenant's network.
func (t *tx) parentNetwork(ctx context.Context, id, tenantID string) error {
	var owner string
	missing := func() error { return notFoundf("network %s not found", id) }
	if err := t.get(ctx, "find network "+id, missing, "SELECT tenant_id FROM networks WHERE id = ?",
		[]any{id}, &owner); err != nil {
		return err
	}
	if owner != tenantID {
		return missing()
	}
	return nil
}

// deleteRow deletes row id of k's table; NotFound when there is none.
func (t *tx) deleteRow(ctx context.Context, k netTable, id string) error {
	n, err := t.execN(ctx, "delete "+k.what+" "+id, "DELETE FROM "+k.table+" WHERE id = ?", id)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("%s %s not found", k.what, id)
	}
	return nil
}

// listFilter builds the WHERE clause of a list of k's table.
func listFilter(tenantID, networkID string, ids []string) (string, []any) {
	var conds []string
	var args []any
	if tenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, tenantID)
	}
	if networkID != "" {
		conds, args = append(conds, "network_id = ?"), append(args, networkID)
	}
	if len(ids) > 0 {
		var cond string
		cond, args = inList("id", ids, args)
		conds = append(conds, cond)
	}
	return where(conds), args
}

// ---- networks ----

const networkCols = "id, tenant_id, name, cidr, vni, is_default, tags, idempotency_key, version, created_at"

func scanNetwork(sc scanner) (*cloud.Network, error) {
	var n cloud.Network
	err := sc.Scan(&n.ID, &n.TenantID, &n.Name, &n.CIDR, &n.VNI, &n.Default, jsonCol{&n.Tags}, &n.IdempotencyKey,
		&n.Version, timeCol{&n.CreatedAt})
	return &n, err
}

// CreateNetwork takes the next VNI from network_vnis: the counter row is
// advanced in this transaction, so that two creates cannot take one VNI
// (on PostgreSQL the second waits for the first, and then sees its VNI or
// loses a serialization race), and a VNI is never given twice, even once
// its network is deleted. A retry by idempotency key takes none.
func (t *tx) CreateNetwork(ctx context.Context, n *cloud.Network) error {
	if err := validNet(networkTable, n.ID, n.TenantID, n.Name); err != nil {
		return err
	}
	if n.CIDR == "" {
		return invalidf("network %s has no CIDR", n.ID)
	}
	if err := retried(ctx, t, networkTable, scanNetwork, n.TenantID, n.IdempotencyKey, n,
		func(o *cloud.Network) string { return o.ID }); err != nil {
		return err
	}
	if err := t.mustExist(ctx, "tenants", "tenant", n.TenantID); err != nil {
		return err
	}
	tags, err := jsonArg("network "+n.ID+" tags", n.Tags)
	if err != nil {
		return err
	}
	var vni int64
	if err := t.get(ctx, "take a VNI", func() error { return internal("take a VNI", errNoVNIRow) },
		"UPDATE network_vnis SET last_vni = last_vni + 1 WHERE id = 1 RETURNING last_vni", nil, &vni); err != nil {
		return err
	}
	if vni > maxVNI {
		return cloud.Errorf(cloud.InsufficientCapacity, "every VNI (1 to %d) was given to a network", maxVNI)
	}
	created := normTime(n.CreatedAt)
	c, err := t.execN(ctx, "create network "+n.ID,
		"INSERT INTO networks ("+networkCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?) ON CONFLICT DO NOTHING",
		n.ID, n.TenantID, n.Name, n.CIDR, vni, n.Default, tags, n.IdempotencyKey, t.s.d.timeArg(created))
	if err != nil {
		return err
	}
	if c == 0 {
		// At read committed a concurrent create may have committed after
		// the lookup above; these see it.
		if err := retried(ctx, t, networkTable, scanNetwork, n.TenantID, n.IdempotencyKey, n,
			func(o *cloud.Network) string { return o.ID }); err != nil {
			return err
		}
		if err := t.nameTaken(ctx, networkTable, n.TenantID, n.Name, n.ID); err != nil {
			return err
		}
		if n.Default {
			if err := t.defaultTaken(ctx, networkTable, n.ID, "tenant "+n.TenantID, "tenant_id = ?",
				n.TenantID); err != nil {
				return err
			}
		}
		return t.notInserted(ctx, networkTable, n.ID)
	}
	n.VNI, n.Version, n.CreatedAt = uint32(vni), 1, created
	return nil
}

var errNoVNIRow = &cloud.Error{Code: cloud.Internal, Message: "network_vnis has no row"}

func (t *tx) GetNetwork(ctx context.Context, id string) (*cloud.Network, error) {
	return one(ctx, t, "get network "+id, func() error { return notFoundf("network %s not found", id) },
		"SELECT "+networkCols+" FROM networks WHERE id = ?", []any{id}, scanNetwork)
}

func (t *tx) NetworkByKey(ctx context.Context, tenantID, key string) (*cloud.Network, error) {
	return byKey(ctx, t, networkTable, scanNetwork, tenantID, key)
}

func (t *tx) ListNetworks(ctx context.Context, f cloud.NetworkFilter) ([]*cloud.Network, error) {
	w, args := listFilter(f.TenantID, "", f.IDs)
	return list(ctx, t, "list networks", "SELECT "+networkCols+" FROM networks"+w+" ORDER BY id", args, scanNetwork)
}

// UpdateNetwork writes Name and Tags; the rest is fixed at creation.
func (t *tx) UpdateNetwork(ctx context.Context, n *cloud.Network) error {
	if err := validNet(networkTable, n.ID, n.TenantID, n.Name); err != nil {
		return err
	}
	if err := t.nameTaken(ctx, networkTable, n.TenantID, n.Name, n.ID); err != nil {
		return err
	}
	tags, err := jsonArg("network "+n.ID+" tags", n.Tags)
	if err != nil {
		return err
	}
	c, err := t.execN(ctx, "update network "+n.ID,
		"UPDATE networks SET name = ?, tags = ?, version = version + 1 WHERE id = ? AND version = ?",
		n.Name, tags, n.ID, n.Version)
	if err != nil {
		return err
	}
	if c == 0 {
		return t.staleVersion(ctx, "networks", "network", n.ID, n.Version)
	}
	n.Version++
	return nil
}

// DeleteNetwork refuses, with a Conflict, a network that still has
// subnets or security groups, which refer to it.
func (t *tx) DeleteNetwork(ctx context.Context, id string) error {
	used, err := t.exists(ctx, "find the subnets and groups of network "+id,
		"SELECT 1 FROM subnets WHERE network_id = ? UNION ALL SELECT 1 FROM security_groups WHERE network_id = ?",
		id, id)
	if err != nil {
		return err
	}
	if used {
		return conflictf("network %s still has subnets or security groups", id)
	}
	return t.deleteRow(ctx, networkTable, id)
}

// ---- subnets ----

const subnetCols = "id, tenant_id, network_id, name, cidr, zone, is_default, ipam_cursor, tags, idempotency_key, version, created_at"

func scanSubnet(sc scanner) (*cloud.Subnet, error) {
	var s cloud.Subnet
	err := sc.Scan(&s.ID, &s.TenantID, &s.NetworkID, &s.Name, &s.CIDR, &s.Zone, &s.Default, &s.Cursor,
		jsonCol{&s.Tags}, &s.IdempotencyKey, &s.Version, timeCol{&s.CreatedAt})
	return &s, err
}

// CreateSubnet checks that the network exists and is the subnet's
// tenant's.
func (t *tx) CreateSubnet(ctx context.Context, s *cloud.Subnet) error {
	if err := validNet(subnetTable, s.ID, s.TenantID, s.Name); err != nil {
		return err
	}
	switch {
	case s.NetworkID == "":
		return invalidf("subnet %s has no network", s.ID)
	case s.CIDR == "":
		return invalidf("subnet %s has no CIDR", s.ID)
	}
	if err := retried(ctx, t, subnetTable, scanSubnet, s.TenantID, s.IdempotencyKey, s,
		func(o *cloud.Subnet) string { return o.ID }); err != nil {
		return err
	}
	if err := t.parentNetwork(ctx, s.NetworkID, s.TenantID); err != nil {
		return err
	}
	tags, err := jsonArg("subnet "+s.ID+" tags", s.Tags)
	if err != nil {
		return err
	}
	created := normTime(s.CreatedAt)
	c, err := t.execN(ctx, "create subnet "+s.ID,
		"INSERT INTO subnets ("+subnetCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?) ON CONFLICT DO NOTHING",
		s.ID, s.TenantID, s.NetworkID, s.Name, s.CIDR, s.Zone, s.Default, int64(s.Cursor), tags, s.IdempotencyKey,
		t.s.d.timeArg(created))
	if err != nil {
		return err
	}
	if c == 0 {
		if err := retried(ctx, t, subnetTable, scanSubnet, s.TenantID, s.IdempotencyKey, s,
			func(o *cloud.Subnet) string { return o.ID }); err != nil {
			return err
		}
		if err := t.nameTaken(ctx, subnetTable, s.NetworkID, s.Name, s.ID); err != nil {
			return err
		}
		if s.Default {
			if err := t.defaultTaken(ctx, subnetTable, s.ID, "network "+s.NetworkID+" in zone "+strconv.Quote(s.Zone),
				"network_id = ? AND zone = ?", s.NetworkID, s.Zone); err != nil {
				return err
			}
		}
		return t.notInserted(ctx, subnetTable, s.ID)
	}
	s.Version, s.CreatedAt = 1, created
	return nil
}

func (t *tx) GetSubnet(ctx context.Context, id string) (*cloud.Subnet, error) {
	return one(ctx, t, "get subnet "+id, func() error { return notFoundf("subnet %s not found", id) },
		"SELECT "+subnetCols+" FROM subnets WHERE id = ?", []any{id}, scanSubnet)
}

func (t *tx) SubnetByKey(ctx context.Context, tenantID, key string) (*cloud.Subnet, error) {
	return byKey(ctx, t, subnetTable, scanSubnet, tenantID, key)
}

func (t *tx) ListSubnets(ctx context.Context, f cloud.SubnetFilter) ([]*cloud.Subnet, error) {
	w, args := listFilter(f.TenantID, f.NetworkID, f.IDs)
	return list(ctx, t, "list subnets", "SELECT "+subnetCols+" FROM subnets"+w+" ORDER BY id", args, scanSubnet)
}

// UpdateSubnet writes Name, Cursor and Tags; the rest is fixed at
// creation.
func (t *tx) UpdateSubnet(ctx context.Context, s *cloud.Subnet) error {
	if err := validNet(subnetTable, s.ID, s.TenantID, s.Name); err != nil {
		return err
	}
	tags, err := jsonArg("subnet "+s.ID+" tags", s.Tags)
	if err != nil {
		return err
	}
	// One statement in the common case (each instance create advances its
	// subnet's cursor): the name's check is part of the update, and only
	// an update that changed nothing asks why.
	c, err := t.execN(ctx, "update subnet "+s.ID,
		"UPDATE subnets SET name = ?, ipam_cursor = ?, tags = ?, version = version + 1 WHERE id = ? AND version = ?"+
			" AND NOT EXISTS (SELECT 1 FROM subnets o WHERE o.network_id = ? AND o.name = ? AND o.id <> ?)",
		s.Name, int64(s.Cursor), tags, s.ID, s.Version, s.NetworkID, s.Name, s.ID)
	if err != nil {
		return err
	}
	if c == 0 {
		if err := t.nameTaken(ctx, subnetTable, s.NetworkID, s.Name, s.ID); err != nil {
			return err
		}
		return t.staleVersion(ctx, "subnets", "subnet", s.ID, s.Version)
	}
	s.Version++
	return nil
}

func (t *tx) DeleteSubnet(ctx context.Context, id string) error {
	return t.deleteRow(ctx, subnetTable, id)
}

// ListSubnetAddresses reads the instances_subnet_address index: its
// conditions are repeated here so that both databases can use it.
func (t *tx) ListSubnetAddresses(ctx context.Context, subnetID string) ([]string, error) {
	addrs, err := list(ctx, t, "list the addresses of subnet "+subnetID,
		"SELECT private_address FROM instances WHERE subnet_id = ? AND subnet_id <> '' AND private_address <> ''"+
			" AND state <> 'terminated'", []any{subnetID}, scanString)
	if err != nil {
		return nil, err
	}
	return derefAll(addrs), nil
}

// ---- security groups ----

const securityGroupCols = "id, tenant_id, network_id, name, description, is_default, ingress, egress, tags," +
	" idempotency_key, version, created_at"

func scanSecurityGroup(sc scanner) (*cloud.SecurityGroup, error) {
	var g cloud.SecurityGroup
	err := sc.Scan(&g.ID, &g.TenantID, &g.NetworkID, &g.Name, &g.Description, &g.Default, jsonCol{&g.Ingress},
		jsonCol{&g.Egress}, jsonCol{&g.Tags}, &g.IdempotencyKey, &g.Version, timeCol{&g.CreatedAt})
	return &g, err
}

// securityGroupDocs returns the JSON text of a group's rules and tags.
func securityGroupDocs(g *cloud.SecurityGroup) (ingress, egress, tags string, err error) {
	if ingress, err = jsonArg("security group "+g.ID+" ingress", g.Ingress); err != nil {
		return
	}
	if egress, err = jsonArg("security group "+g.ID+" egress", g.Egress); err != nil {
		return
	}
	tags, err = jsonArg("security group "+g.ID+" tags", g.Tags)
	return
}

// CreateSecurityGroup checks that the network exists and is the group's
// tenant's.
func (t *tx) CreateSecurityGroup(ctx context.Context, g *cloud.SecurityGroup) error {
	if err := validNet(securityGroupTable, g.ID, g.TenantID, g.Name); err != nil {
		return err
	}
	if g.NetworkID == "" {
		return invalidf("security group %s has no network", g.ID)
	}
	if err := retried(ctx, t, securityGroupTable, scanSecurityGroup, g.TenantID, g.IdempotencyKey, g,
		func(o *cloud.SecurityGroup) string { return o.ID }); err != nil {
		return err
	}
	if err := t.parentNetwork(ctx, g.NetworkID, g.TenantID); err != nil {
		return err
	}
	ingress, egress, tags, err := securityGroupDocs(g)
	if err != nil {
		return err
	}
	created := normTime(g.CreatedAt)
	c, err := t.execN(ctx, "create security group "+g.ID,
		"INSERT INTO security_groups ("+securityGroupCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)"+
			" ON CONFLICT DO NOTHING",
		g.ID, g.TenantID, g.NetworkID, g.Name, g.Description, g.Default, ingress, egress, tags, g.IdempotencyKey,
		t.s.d.timeArg(created))
	if err != nil {
		return err
	}
	if c == 0 {
		if err := retried(ctx, t, securityGroupTable, scanSecurityGroup, g.TenantID, g.IdempotencyKey, g,
			func(o *cloud.SecurityGroup) string { return o.ID }); err != nil {
			return err
		}
		if err := t.nameTaken(ctx, securityGroupTable, g.NetworkID, g.Name, g.ID); err != nil {
			return err
		}
		if g.Default {
			if err := t.defaultTaken(ctx, securityGroupTable, g.ID, "network "+g.NetworkID, "network_id = ?",
				g.NetworkID); err != nil {
				return err
			}
		}
		return t.notInserted(ctx, securityGroupTable, g.ID)
	}
	g.Version, g.CreatedAt = 1, created
	return nil
}

func (t *tx) GetSecurityGroup(ctx context.Context, id string) (*cloud.SecurityGroup, error) {
	return one(ctx, t, "get security group "+id, func() error { return notFoundf("security group %s not found", id) },
		"SELECT "+securityGroupCols+" FROM security_groups WHERE id = ?", []any{id}, scanSecurityGroup)
}

func (t *tx) SecurityGroupByKey(ctx context.Context, tenantID, key string) (*cloud.SecurityGroup, error) {
	return byKey(ctx, t, securityGroupTable, scanSecurityGroup, tenantID, key)
}

func (t *tx) ListSecurityGroups(ctx context.Context, f cloud.SecurityGroupFilter) ([]*cloud.SecurityGroup, error) {
	w, args := listFilter(f.TenantID, f.NetworkID, f.IDs)
	return list(ctx, t, "list security groups", "SELECT "+securityGroupCols+" FROM security_groups"+w+" ORDER BY id",
		args, scanSecurityGroup)
}

// UpdateSecurityGroup writes Name, Description, Ingress, Egress and Tags;
// the rest is fixed at creation.
func (t *tx) UpdateSecurityGroup(ctx context.Context, g *cloud.SecurityGroup) error {
	if err := validNet(securityGroupTable, g.ID, g.TenantID, g.Name); err != nil {
		return err
	}
	if err := t.nameTaken(ctx, securityGroupTable, g.NetworkID, g.Name, g.ID); err != nil {
		return err
	}
	ingress, egress, tags, err := securityGroupDocs(g)
	if err != nil {
		return err
	}
	c, err := t.execN(ctx, "update security group "+g.ID,
		"UPDATE security_groups SET name = ?, description = ?, ingress = ?, egress = ?, tags = ?,"+
			" version = version + 1 WHERE id = ? AND version = ?",
		g.Name, g.Description, ingress, egress, tags, g.ID, g.Version)
	if err != nil {
		return err
	}
	if c == 0 {
		return t.staleVersion(ctx, "security_groups", "security group", g.ID, g.Version)
	}
	g.Version++
	return nil
}

func (t *tx) DeleteSecurityGroup(ctx context.Context, id string) error {
	return t.deleteRow(ctx, securityGroupTable, id)
}
