# A network is imported by its ID.
terraform import gpucloud_network.train vpc-0123456789abcdef
