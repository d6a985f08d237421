resource "gpucloud_address" "web" {
  zone = "local-a"
  tags = { app = "web" }
}
