# A queue endpoint that scales to zero: jobs go to its run URL. One
# worker waits paused (warm) to answer the first request without a cold
# start, and every worker mounts the shared model volume.
resource "gpucloud_volume" "models" {
  name     = "models"
  size_gib = 100
  kind     = "shared"
}

resource "gpucloud_endpoint" "embed" {
  name        = "embed"
  image       = "ghcr.io/example/embedder:1.4"
  offerings   = ["l40s.1x", "h100.1x"]
  port        = 8080
  health_path = "/health"
  mode        = "queue"
  min         = 0
  max         = 4
  warm        = 1
  volumes     = [gpucloud_volume.models.id]
  concurrency = 2
}

output "run_url" {
  value = gpucloud_endpoint.embed.url
}
