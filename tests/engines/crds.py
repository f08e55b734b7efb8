"""The real CRDs the Kubernetes renders are checked against (tests/data/k8s-crds, by file name): each one's served
version's openAPIV3Schema and a validator for it, made once per test process. Read with libyaml's safe loader (the
Kubeflow CRDs are 0.6 MB: about 1 s each in the pure-Python loader); the validator is built without checking the
schema itself (jsonschema.validate does, 0.7 s for a Kubeflow CRD, whose schema its API server accepted; a
written-out one is checked by its own test)."""

from __future__ import annotations

from functools import cache

import jsonschema
import yaml

from tests.conftest import DATA

MPIJOB = "kubeflow.org_mpijobs.yaml"
PYTORCHJOB = "kubeflow.org_pytorchjobs.yaml"
COMPUTE_DOMAIN = "resource.nvidia.com_computedomains.yaml"  # NVIDIA's DRA driver's, written out


@cache
def crd_schema(crd: str) -> dict:
    """The served (and stored) version's openAPIV3Schema of the CRD in `crd`."""
    loaded = yaml.load((DATA / "k8s-crds" / crd).read_text(), Loader=yaml.CSafeLoader)
    return next(v for v in loaded["spec"]["versions"] if v["served"] and v["storage"])["schema"]["openAPIV3Schema"]


@cache
def _validator(crd: str) -> jsonschema.protocols.Validator:
    schema = crd_schema(crd)
    return jsonschema.validators.validator_for(schema)(schema)


def validate(obj: dict, crd: str) -> None:
    """Raise jsonschema.ValidationError where `obj` breaks the CRD's schema."""
    _validator(crd).validate(obj)
