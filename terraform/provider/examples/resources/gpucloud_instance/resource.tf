resource "gpucloud_volume" "data" {
  name     = "data"
  size_gib = 100
}

resource "gpucloud_instance" "notebook" {
  name       = "notebook"
  offering   = "h100.1x"
  image      = "python:3.12"
  command    = ["python", "-m", "http.server", "8888"]
  env        = { PYTHONUNBUFFERED = "1" }
  volume_ids = [gpucloud_volume.data.id]
  publish    = [8888]
  tags       = { owner = "me" }

  timeouts {
    create = "15m"
  }
}
