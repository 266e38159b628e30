"""Frontends: models in other formats turned into ODLA computations through the ODLA op API,
as HALO's generated code builds them."""
