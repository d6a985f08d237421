// Package stack is the pure core of stacks: declarative templates of
// cloud resources, and the plans that take a stack from what it is to
// what its template says. It parses and checks templates, binds their
// parameters, expands counted resources into copies, orders them by
// dependency, resolves references, and diffs a template against the state
// of the last apply (and a drift check) into a plan. It does no I/O but
// reading its embedded blueprints, reads no clock and uses no randomness;
// the stack service applies the plans through the domain services.
//
// # Templates
//
// A template is YAML or JSON with four top-level keys, no others:
//
//	description: LLM fine-tuning cluster
//	parameters:
//	  nodes: {type: integer, default: 2, min: 1, max: 64}
//	  offering: {type: string, default: h100.8x, allowed: [h100.8x, a100.8x]}
//	resources:
//	  pg:
//	    type: placement_group
//	    properties: {name: train, strategy: cluster}
//	  head:
//	    type: instance
//	    properties:
//	      offering: ${param.offering}
//	      placement_group: ${pg.id}
//	      labels: ["driver>=550", interconnect=infiniband]
//	  workers:
//	    type: instance
//	    count: ${param.nodes - 1}
//	    depends_on: [head]
//	    properties:
//	      name: worker-${count.index}
//	      offering: ${param.offering}
//	      placement_group: ${pg.id}
//	outputs:
//	  head_address: {value: "${head.private_address}"}
//
// Parameters have a type (string, integer, number, boolean, list), an
// optional default, a description and constraints: min and max (the value
// of a number, the length of a string or list), allowed (the values it, or
// each element of a list, may take) and pattern (an RE2 expression the
// whole string must match). A default must satisfy them.
//
// Resources have a type (see Types), properties (the fields of the API's
// create body for that type), and optionally depends_on (resource names),
// count (an integer from 0 to 256, or ${param.NAME}, ${param.NAME - K} or
// ${param.NAME + K} over an integer parameter; copies are addressed
// NAME[i]) and deletion_policy (delete, the default, or retain: removing
// the resource or destroying the stack leaves it alive and forgets it).
// Names are 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter.
//
// # References
//
// Strings in properties and output values may hold references:
// ${param.NAME}, ${RES.ATTR}, ${RES[i].ATTR} and, in a counted resource's
// properties, ${count.index} (the copy's index); $${ is a literal ${. A
// string that is exactly one reference takes the value's type (an integer
// stays an integer, a list a list); references inside a longer string are
// formatted. ${RES.ATTR} of a counted resource, as a whole string, is the
// list of every copy's attribute. A reference to a resource is a
// dependency; a dependency cycle is an error naming it.
//
// # Plans
//
// Plan compares a Bound template with the State of the last apply and the
// Live findings of a drift check: each copy is created, updated in place
// (only TypeInfo.Mutable properties differ), replaced, started again,
// deleted, retained or left alone, with a reason. Deletions come last, in
// reverse dependency order. A commitment is a contract: a plan never
// changes, replaces or deletes one. A replacement that keeps a live
// copy's unique properties (TypeInfo.Unique: a network's name, a subnet's
// or security group's network and name) is an error, since the new copy
// is made before the old one goes. PlanDestroy plans a destroy.
//
// Every error of Parse and Bind is an *Error with the line and column of
// the problem, collected as Errors.
package stack
