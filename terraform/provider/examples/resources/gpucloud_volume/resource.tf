resource "gpucloud_volume" "data" {
  name     = "data"
  size_gib = 500
  zone     = "local-a"
  kind     = "block"
  tags     = { team = "ml" }
}
