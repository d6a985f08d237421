resource "gpucloud_network" "train" {
  name = "train"
  cidr = "10.10.0.0/16"
}
