// Package advise is the selection advisor (the seed article's 技术选型矩阵,
// "technology selection matrix"): a workload in, ranked offerings and
// pricing mixes out, each with its cost and the reasons along the
// article's three dimensions: compute density, network topology and
// storage. `gpucloud advise` prints it; the console's launch flow is to
// call the same function.
//
// Advise is pure: no I/O, no clock, no randomness. Its inputs are the
// Workload, a Market (the prices, spot pools and availability any tenant
// may read: LiveMarket builds it from what a server shows, ListMarket
// offline from list prices) and the catalog.
//
// # Rules
//
// Memory (Estimate): inference needs params × bytes per weight (fp32 4,
// bf16/fp16 2, fp8/int8 1, int4 0.5) × 1.2 for the KV cache and
// activations; full training with Adam needs params × 16 bytes (weights,
// gradients, fp32 master weights, two moments) × 1.2 for activations. A
// given memory size wins. A job of N nodes shards it evenly over them.
//
// Compute density (per offering): an instance gives one GPU, a MIG slice
// or a share, or several GPUs. The model fits one of them, or is split
// over several GPUs of one instance; splitting needs GPUs of 32 GiB or
// more, and a model that needs 32 GiB or more gets no GPU under 32 GiB
// (the article: Transformers need at least 32 GB, A100 40GB class; CV
// models do with 16 GB). The precision must be one the GPU's architecture
// has (ArchOf, SupportOf): bf16 and tf32 need Ampere or later, fp8 Ada
// Lovelace or Hopper; int8 and int4 are inference formats.
//
// Network topology: training split over several GPUs needs NVLink;
// inference may split over PCIe (the reason says it is slower). A job of
// more than one node needs an InfiniBand/RoCE-class offering; the catalog
// does not record host networking, so those are the whole 8-GPU NVLink
// hosts (metal, or all 8 GPUs), which HGX systems pair with one
// InfiniBand/RoCE NIC per GPU.
//
// Storage: a checkpoint volume sized from the model (the weights for
// inference; two checkpoints of 12 bytes per parameter for training),
// priced per GiB-month for the workload's days. It is the same for every
// option, and part of each total.
//
// Pricing mixes: on demand; a reservation of the nodes for the workload's
// days, all upfront (priced by billing.NewCommitment, held 24 h a day);
// the retainer plan; spot; and for two nodes or more one node on demand
// with the rest on spot. Spot needs a checkpoint interval: a reclaim
// loses half of it on average, so the expected lost running time is
// reclaims per hour × the spot nodes × running hours × interval / 2, paid
// for at the option's prices; a pool where the job expects a reclaim
// before its first checkpoint (rate × interval ≥ 1) is not used. A mix
// other than on demand is offered only when it costs at least a cent less
// than on demand on the same offering.
//
// A deadline excludes options expected to finish later (losses
// included); a budget excludes options that cost more. An offering no host
// could ever run (Availability.Hosts 0) is excluded. The options that fit
// now (or may: unknown) come first, each group by total cost.
package advise
