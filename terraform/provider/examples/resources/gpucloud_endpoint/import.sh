# An endpoint is imported by its ID, or by its name.
terraform import gpucloud_endpoint.embed ep-0123456789abcdef
terraform import gpucloud_endpoint.embed embed
