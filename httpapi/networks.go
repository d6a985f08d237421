package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// The routes of private networks (service.Networks): networks, subnets
// and security groups. Creates answer 201 with the Location, or 200 with
// what a retry under the same Idempotency-Key answers; deletes 204, or
// 409 while the resource is in use.

// createNetwork handles POST /v1/networks.
func (s *handlers) createNetwork(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateNetworkRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Networks.CreateNetwork,
		func(v *cloud.Network) string { return "/v1/networks/" + v.ID })
}

// listNetworks handles GET /v1/networks; a tenant's first listing makes
// its default network.
func (s *handlers) listNetworks(w http.ResponseWriter, r *http.Request, p principal) error {
	ns, err := s.svc.Networks.ListNetworks(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.NetworkList{Networks: ns})
	return nil
}

// getNetwork handles GET /v1/networks/{id}.
func (s *handlers) getNetwork(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Networks.GetNetwork)
}

// deleteNetwork handles DELETE /v1/networks/{id}, with its subnets and
// groups.
func (s *handlers) deleteNetwork(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerDelete(w, r, p, s.svc.Networks.DeleteNetwork)
}

// createSubnet handles POST /v1/subnets.
func (s *handlers) createSubnet(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateSubnetRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Networks.CreateSubnet,
		func(v *cloud.Subnet) string { return "/v1/subnets/" + v.ID })
}

// listSubnets handles GET /v1/subnets (?network: one network's).
func (s *handlers) listSubnets(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	subs, err := s.svc.Networks.ListSubnets(r.Context(), p.actor(), q.Get("tenant"), q.Get("network"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.SubnetList{Subnets: subs})
	return nil
}

// getSubnet handles GET /v1/subnets/{id}.
func (s *handlers) getSubnet(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Networks.GetSubnet)
}

// deleteSubnet handles DELETE /v1/subnets/{id}.
func (s *handlers) deleteSubnet(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerDelete(w, r, p, s.svc.Networks.DeleteSubnet)
}

// createSecurityGroup handles POST /v1/security-groups.
func (s *handlers) createSecurityGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateSecurityGroupRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Networks.CreateSecurityGroup,
		func(v *cloud.SecurityGroup) string { return "/v1/security-groups/" + v.ID })
}

// listSecurityGroups handles GET /v1/security-groups (?network: one
// network's).
func (s *handlers) listSecurityGroups(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	gs, err := s.svc.Networks.ListSecurityGroups(r.Context(), p.actor(), q.Get("tenant"), q.Get("network"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.SecurityGroupList{SecurityGroups: gs})
	return nil
}

// getSecurityGroup handles GET /v1/security-groups/{id}; the ETag is the
// group's version, for If-Match on authorize and revoke.
func (s *handlers) getSecurityGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	g, err := s.svc.Networks.GetSecurityGroup(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(g.Version))
	writeJSON(w, http.StatusOK, g)
	return nil
}

// deleteSecurityGroup handles DELETE /v1/security-groups/{id}.
func (s *handlers) deleteSecurityGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerDelete(w, r, p, s.svc.Networks.DeleteSecurityGroup)
}

// authorizeSecurityGroup handles POST /v1/security-groups/{id}/authorize:
// the group with its new rule. If-Match, when sent, must be the version
// read.
func (s *handlers) authorizeSecurityGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	var req api.AuthorizeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	g, err := s.svc.Networks.Authorize(r.Context(), p.actor(), r.PathValue("id"), req, want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(g.Version))
	writeJSON(w, http.StatusOK, g)
	return nil
}

// revokeSecurityGroup handles POST /v1/security-groups/{id}/revoke: the
// group without the rule. If-Match as for authorize.
func (s *handlers) revokeSecurityGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	var req api.RevokeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	g, err := s.svc.Networks.Revoke(r.Context(), p.actor(), r.PathValue("id"), req, want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(g.Version))
	writeJSON(w, http.StatusOK, g)
	return nil
}
