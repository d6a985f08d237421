data "gpucloud_offering" "l4" {
  name = "l4.1x"
}

output "l4_memory_mib" {
  value = data.gpucloud_offering.l4.memory_mib
}
