# The H100 offerings some host has room for now.
data "gpucloud_offerings" "h100" {
  model    = "h100"
  fits_now = true
}

output "h100_offerings" {
  value = data.gpucloud_offerings.h100.names
}
