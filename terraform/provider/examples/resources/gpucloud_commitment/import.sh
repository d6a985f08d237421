# A commitment is imported by its ID.
terraform import gpucloud_commitment.h100 cm-0123456789abcdef
