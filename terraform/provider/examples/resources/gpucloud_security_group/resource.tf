resource "gpucloud_network" "train" {
  name = "train"
  cidr = "10.10.0.0/16"
}

# A new group allows all egress and no ingress: add rules beside it.
resource "gpucloud_security_group" "cluster" {
  network_id  = gpucloud_network.train.id
  name        = "cluster"
  description = "the training nodes"
}
