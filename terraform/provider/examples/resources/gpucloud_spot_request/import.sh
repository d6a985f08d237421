# A spot request is imported by its ID.
terraform import gpucloud_spot_request.train sr-0123456789abcdef
