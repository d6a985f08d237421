resource "gpucloud_network" "train" {
  name = "train"
  cidr = "10.10.0.0/16"
}

resource "gpucloud_subnet" "a" {
  network_id = gpucloud_network.train.id
  name       = "a"
  cidr       = "10.10.1.0/24"
  zone       = "local-a"
}
