# A two-node training cluster: a private network with a subnet, a
# security group that lets the nodes talk to each other and SSH in, a
# spread placement group, a checkpoint volume per node, and the two
# instances. docs/TERRAFORM.md says how to run it against `gpucloud up`.

terraform {
  required_providers {
    gpucloud = {
      source = "gpucloud/gpucloud"
    }
  }
}

# The endpoint, token and CA come from $GPUCLOUD_SERVER, $GPUCLOUD_TOKEN
# and $GPUCLOUD_CA_FINGERPRINT, or from the CLI's configuration file that
# `gpucloud up` and `gpucloud login` write.
provider "gpucloud" {}

variable "offering" {
  description = "The instance type of each node (see data.gpucloud_offerings)."
  type        = string
  default     = "h100.1x"
}

variable "nodes" {
  description = "How many nodes."
  type        = number
  default     = 2
}

variable "ssh_public_key" {
  description = "An OpenSSH public key to reach the nodes with (gpucloud instances ssh)."
  type        = string
  default     = null
}

resource "gpucloud_key" "me" {
  count      = var.ssh_public_key == null ? 0 : 1
  public_key = var.ssh_public_key
}

resource "gpucloud_network" "train" {
  name = "train"
  cidr = "10.10.0.0/16"
}

resource "gpucloud_subnet" "a" {
  network_id = gpucloud_network.train.id
  name       = "a"
  cidr       = "10.10.1.0/24"
  zone       = "local-a" # the zone of `gpucloud up`'s fleet
}

resource "gpucloud_security_group" "cluster" {
  network_id  = gpucloud_network.train.id
  name        = "cluster"
  description = "the training nodes"
}

# The nodes reach each other on every port (the rendezvous, NCCL).
resource "gpucloud_security_group_rule" "peers" {
  security_group_id      = gpucloud_security_group.cluster.id
  direction              = "ingress"
  protocol               = "all"
  peer_security_group_id = gpucloud_security_group.cluster.id
}

resource "gpucloud_security_group_rule" "ssh" {
  security_group_id = gpucloud_security_group.cluster.id
  direction         = "ingress"
  protocol          = "tcp"
  from_port         = 22
  to_port           = 22
  cidr              = "0.0.0.0/0"
}

resource "gpucloud_placement_group" "train" {
  name     = "train"
  strategy = "spread"
}

resource "gpucloud_volume" "checkpoints" {
  count    = var.nodes
  name     = "checkpoints-${count.index}"
  size_gib = 100
}

resource "gpucloud_instance" "node" {
  count              = var.nodes
  name               = "node-${count.index}"
  offering           = var.offering
  command            = ["sleep", "infinity"]
  subnet_id          = gpucloud_subnet.a.id
  security_group_ids = [gpucloud_security_group.cluster.id]
  placement_group_id = gpucloud_placement_group.train.id
  volume_ids         = [gpucloud_volume.checkpoints[count.index].id]
  env = {
    RANK        = tostring(count.index)
    WORLD_SIZE  = tostring(var.nodes)
    MASTER_ADDR = "node-0.train.internal"
  }
  tags = { job = "train" }

  timeouts {
    create = "15m"
  }
}

output "nodes" {
  value = { for n in gpucloud_instance.node : n.name => n.private_address }
}
