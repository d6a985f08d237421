# Where to fine-tune a 7B model for 16 hours a day over two weeks,
# checkpointing every 30 minutes (which lets spot in), within 5000.
data "gpucloud_advise" "finetune" {
  params           = "7B"
  task             = "train"
  hours_per_day    = 16
  days             = 14
  checkpoint_every = "30m"
  budget           = "5000"
  top              = 3
}

output "best" {
  value = data.gpucloud_advise.finetune.best_offering
}

output "options" {
  value = [for o in data.gpucloud_advise.finetune.options : "${o.offering} ${o.mix}: ${o.total}"]
}
