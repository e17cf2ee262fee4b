"""The NVML stand-in (fake_nvml.c) and helpers to edit its data file on a copied fixture node."""
