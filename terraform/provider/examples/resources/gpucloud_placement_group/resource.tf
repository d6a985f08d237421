# Members on different hosts, and on different racks.
resource "gpucloud_placement_group" "spread" {
  name     = "spread"
  strategy = "spread"
  by_rack  = true
}
