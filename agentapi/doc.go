// Package agentapi is the agent protocol of gpucloud's /v1 API
// (docs/CONTROL_PLANE.md, "Agent protocol"): how a host agent joins the
// control plane, heartbeats its inventory, fetches the instances its host
// must run or stop, and reports their phases and output. It holds the
// protocol's wire types, among them the Inventory a host reports, and
// Client, the agent's side of it.
//
// Both sides meet here: the agent (package agent and its drivers) and the
// server's handlers (package httpapi) import agentapi, and agentapi imports
// neither, nor anything else of the server, so that the agent is built
// without the control plane's packages. Admins create join tokens with
// package client.
package agentapi
