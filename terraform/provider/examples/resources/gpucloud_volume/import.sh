# A volume is imported by its ID.
terraform import gpucloud_volume.data v-0123456789abcdef
