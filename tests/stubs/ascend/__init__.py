"""The DCMI stand-in (fake_dcmi.c) and helpers to edit the data it serves."""
