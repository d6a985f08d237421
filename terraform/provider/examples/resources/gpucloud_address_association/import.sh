# An association is imported by its address's ID.
terraform import gpucloud_address_association.web eip-0123456789abcdef
