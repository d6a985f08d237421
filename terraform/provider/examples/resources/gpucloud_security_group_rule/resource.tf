resource "gpucloud_network" "train" {
  name = "train"
  cidr = "10.10.0.0/16"
}

resource "gpucloud_security_group" "cluster" {
  network_id = gpucloud_network.train.id
  name       = "cluster"
}

# The group's members reach each other on every port.
resource "gpucloud_security_group_rule" "peers" {
  security_group_id      = gpucloud_security_group.cluster.id
  direction              = "ingress"
  protocol               = "all"
  peer_security_group_id = gpucloud_security_group.cluster.id
}

# SSH from anywhere.
resource "gpucloud_security_group_rule" "ssh" {
  security_group_id = gpucloud_security_group.cluster.id
  direction         = "ingress"
  protocol          = "tcp"
  from_port         = 22
  to_port           = 22
  cidr              = "0.0.0.0/0"
  description       = "ssh"
}
