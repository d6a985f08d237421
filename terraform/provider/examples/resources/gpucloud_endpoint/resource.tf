# A queue endpoint that scales to zero: jobs go to its run URL.
resource "gpucloud_endpoint" "embed" {
  name        = "embed"
  image       = "ghcr.io/example/embedder:1.4"
  offerings   = ["l40s.1x", "h100.1x"]
  port        = 8080
  health_path = "/health"
  mode        = "queue"
  min         = 0
  max         = 4
  concurrency = 2
}

output "run_url" {
  value = gpucloud_endpoint.embed.url
}
