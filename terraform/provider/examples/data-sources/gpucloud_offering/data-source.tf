data "gpucloud_offering" "l40s" {
  name = "l40s.1x"
}

output "l40s_memory_mib" {
  value = data.gpucloud_offering.l40s.memory_mib
}
