"""Structural tests of terraform/, parsed with python-hcl2: no terraform, provider or network.

`terraform validate` cannot run here (the provider registry is unreachable), so these tests pin
what it would not check anyway: every input is wired, IAM stays least-privilege, nothing published
is lost, and the job's parameter names match the flex template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
import pytest

TERRAFORM_DIR = Path(__file__).resolve().parents[2] / "terraform"
TFVARS_EXAMPLE = TERRAFORM_DIR / "terraform.tfvars.example"

# The flex template's parameter names. A drift test against flex_template.json imports this.
FLEX_TEMPLATE_PARAMETERS = frozenset(
    {
        "input_subscription",
        "output_topic",
        "errors_topic",
        "agent",
        "model_provider",
        "model_id",
        "model_project",
        "model_location",
        "firestore_project",
        "firestore_database",
        "firestore_collection",
        "longterm_store",
        "call_journal",
        "call_journal_collection",
    }
)

EXPECTED_OUTPUTS = frozenset(
    {
        "input_subscription",
        "input_topic",
        "output_topic",
        "errors_topic",
        "errors_subscription",
        "intents_subscription",
        "firestore_project",
        "firestore_database",
        "firestore_collection",
        "call_journal_collection",
        "model_api_key_secret_version_prefix",
        "service_account_email",
        "staging_bucket",
        "temp_location",
        "template_image",
        "template_spec_gcs_path",
        "region",
        "job_id",
    }
)

# Roles the worker may hold on the whole project: none of them has a narrower resource to bind to.
ALLOWED_PROJECT_ROLES = frozenset(
    {"roles/dataflow.worker", "roles/datastore.user", "roles/aiplatform.user"}
)

# Every role the worker holds, on any resource. The call journal lives in the long-term store's
# database and adds none (terraform/README.md, "Worker IAM").
WORKER_ROLES = ALLOWED_PROJECT_ROLES | {
    "roles/pubsub.subscriber",
    "roles/pubsub.viewer",
    "roles/pubsub.publisher",
    "roles/storage.objectAdmin",
    "roles/artifactregistry.reader",
    "roles/secretmanager.secretAccessor",
}

# The datastore.user condition, verbatim: exactly the module's database, nothing wider.
FIRESTORE_CONDITION = (
    'resource.name == "projects/${var.project_id}/databases/'
    '${google_firestore_database.memory.name}"'
)

# Journal document fields nothing filters or orders on (src/beam_agents/stores/_journal_rules.py):
# the TTL timestamp, the response bytes and a long key's bytes. Reads query entity_key_hex (keys
# up to 749 bytes) or entity_key_digest (longer ones) and seq, which keep theirs.
JOURNAL_TTL_FIELD = "expire_at"
JOURNAL_UNINDEXED_FIELDS = frozenset({JOURNAL_TTL_FIELD, "response", "entity_key"})

REQUIRED_APIS = frozenset(
    {
        "dataflow.googleapis.com",
        "firestore.googleapis.com",
        "pubsub.googleapis.com",
        "artifactregistry.googleapis.com",
        "aiplatform.googleapis.com",
        "storage.googleapis.com",
    }
)

# Resource types in this module whose provider schema has a `labels` argument.
LABELED_TYPES = frozenset(
    {
        "google_pubsub_topic",
        "google_pubsub_subscription",
        "google_storage_bucket",
        "google_artifact_registry_repository",
        "google_dataflow_flex_template_job",
        "google_secret_manager_secret",
    }
)

# The model API key secret and everything that exists only with it (model_api_key_secret_id).
SECRET = "google_secret_manager_secret.model_api_key"
SECRET_ENABLED = "local.model_api_key_secret_enabled"
SECRET_ACCESSOR = "roles/secretmanager.secretAccessor"

_OPTIONS = hcl2.SerializationOptions(
    strip_string_quotes=True, explicit_blocks=False, with_comments=False
)
_ROLE = re.compile(r"roles/[A-Za-z0-9_.]+")
_PRIMITIVE_ROLE = re.compile(r"roles/(?:owner|editor|viewer)(?![\w.])")


@dataclass(frozen=True)
class Block:
    """One `resource` or `data` block."""

    kind: str
    type: str
    name: str
    body: dict[str, Any]

    @property
    def address(self) -> str:
        prefix = "data." if self.kind == "data" else ""
        return f"{prefix}{self.type}.{self.name}"

    @property
    def text(self) -> str:
        return json.dumps(self.body)


@cache
def _parsed() -> dict[str, dict[str, Any]]:
    files = sorted(TERRAFORM_DIR.glob("*.tf"))
    assert files, f"no .tf files in {TERRAFORM_DIR}"
    result = {}
    for path in files:
        with path.open(encoding="utf-8") as handle:
            result[path.name] = hcl2.load(handle, serialization_options=_OPTIONS)
    return result


def _named_blocks(kind: str) -> dict[str, dict[str, Any]]:
    """Variables or outputs by name, from every file."""
    found: dict[str, dict[str, Any]] = {}
    for module in _parsed().values():
        for entry in module.get(kind, []):
            for name, body in entry.items():
                assert name not in found, f"{kind} {name!r} is declared twice"
                found[name] = body
    return found


def _blocks() -> Iterator[Block]:
    for module in _parsed().values():
        for kind in ("resource", "data"):
            for entry in module.get(kind, []):
                for rtype, named in entry.items():
                    for name, body in named.items():
                        yield Block(kind, rtype, name, body)


def _resources(rtype: str) -> list[Block]:
    return [b for b in _blocks() if b.kind == "resource" and b.type == rtype]


def _one(rtype: str) -> Block:
    found = _resources(rtype)
    assert len(found) == 1, f"expected one {rtype}, found {[b.address for b in found]}"
    return found[0]


def _locals() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for module in _parsed().values():
        for entry in module.get("locals", []):
            merged.update(entry)
    return merged


def _variables() -> dict[str, dict[str, Any]]:
    return _named_blocks("variable")


def _outputs() -> dict[str, dict[str, Any]]:
    return _named_blocks("output")


def _refs(text: str, prefix: str) -> set[str]:
    return set(re.findall(rf"(?<![\w.]){re.escape(prefix)}\.([A-Za-z_][\w-]*)", text))


def _expand_locals(text: str, seen: frozenset[str] = frozenset()) -> str:
    """The expression with every `local.X` it uses appended, recursively."""
    locals_ = _locals()
    parts = [text]
    for name in sorted(_refs(text, "local") - seen):
        assert name in locals_, f"local.{name} is referenced but not defined"
        parts.append(_expand_locals(json.dumps(locals_[name]), seen | {name}))
    return "\n".join(parts)


def _references(text: str) -> set[str]:
    """`type.name` addresses of resources (and `data.type.name`) an expression reaches."""
    expanded = _expand_locals(text)
    addresses = set(re.findall(r"(?<![\w.])(google_[a-z0-9_]+\.[A-Za-z_][\w-]*)", expanded))
    addresses |= {
        f"data.{a}" for a in re.findall(r"(?<![\w.])data\.(google_[a-z0-9_]+\.\w+)", expanded)
    }
    return addresses


def _is_wired(text: str) -> bool:
    expanded = _expand_locals(text)
    return bool(_refs(expanded, "var") or _references(text))


def _job_parameters() -> dict[str, str]:
    return _one("google_dataflow_flex_template_job").body["parameters"]


def _parameter_target(parameter: str) -> str:
    (target,) = _references(_job_parameters()[parameter])
    return target


def _module_text_without_variables() -> str:
    return "\n".join(
        json.dumps({kind: value for kind, value in module.items() if kind != "variable"})
        for module in _parsed().values()
    )


# ---------------------------------------------------------------------------
# Inputs and outputs
# ---------------------------------------------------------------------------


def test_every_variable_has_description_and_type() -> None:
    missing = {
        name: [key for key in ("description", "type") if not body.get(key)]
        for name, body in _variables().items()
    }
    assert not {name: keys for name, keys in missing.items() if keys}


def test_every_declared_variable_is_used() -> None:
    used = _refs(_module_text_without_variables(), "var")
    assert set(_variables()) - used == set()


def test_every_referenced_variable_is_declared() -> None:
    referenced = _refs("\n".join(json.dumps(m) for m in _parsed().values()), "var")
    assert referenced - set(_variables()) == set()


def test_outputs_are_exactly_the_deploy_values() -> None:
    assert set(_outputs()) == EXPECTED_OUTPUTS


@pytest.mark.parametrize("name", sorted(EXPECTED_OUTPUTS))
def test_output_is_described_and_wired(name: str) -> None:
    body = _outputs()[name]
    assert body.get("description"), f"output {name} has no description"
    assert _is_wired(json.dumps(body["value"])), f"output {name} is a literal, not wired"


def test_job_id_output_is_null_unless_the_job_exists() -> None:
    value = _outputs()["job_id"]["value"]
    assert "google_dataflow_flex_template_job.pipeline[*]" in value
    assert value.startswith("${one(")


def test_tfvars_example_sets_only_declared_variables() -> None:
    with TFVARS_EXAMPLE.open(encoding="utf-8") as handle:
        assigned = set(hcl2.load(handle, serialization_options=_OPTIONS))
    commented = set(
        re.findall(r"^#\s*([a-z_][a-z0-9_]*)\s*=", TFVARS_EXAMPLE.read_text(), flags=re.M)
    )
    assert (assigned | commented) - set(_variables()) == set()
    required = {name for name, body in _variables().items() if "default" not in body}
    assert required <= assigned, "the example must set every variable without a default"


# ---------------------------------------------------------------------------
# Providers
# ---------------------------------------------------------------------------


def _required_providers() -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for module in _parsed().values():
        for terraform in module.get("terraform", []):
            for entry in terraform.get("required_providers", []):
                found.update(entry)
    return found


def test_terraform_version_is_constrained() -> None:
    versions = [
        t["required_version"]
        for module in _parsed().values()
        for t in module.get("terraform", [])
        if "required_version" in t
    ]
    assert versions == [">= 1.5"]


def test_google_provider_is_pinned_to_a_major_version() -> None:
    providers = _required_providers()
    assert providers["google"]["source"] == "hashicorp/google"
    for name, spec in providers.items():
        assert re.fullmatch(r"~>\s*\d+\.\d+", spec.get("version", "")), f"{name} is not pinned"


def test_every_provider_used_is_declared() -> None:
    used = {b.body["provider"].split(".")[0] for b in _blocks() if "provider" in b.body}
    assert used <= set(_required_providers())


# ---------------------------------------------------------------------------
# IAM: least privilege, additive members only
# ---------------------------------------------------------------------------


def test_no_primitive_roles_anywhere() -> None:
    text = "\n".join(json.dumps(m) for m in _parsed().values())
    assert not _PRIMITIVE_ROLE.findall(text)


def test_iam_is_additive_members_only() -> None:
    authoritative = [
        b.address for b in _blocks() if b.type.endswith(("_iam_policy", "_iam_binding"))
    ]
    assert authoritative == []


def test_project_level_roles_are_exactly_the_allowed_set() -> None:
    granted: set[str] = set()
    for block in _resources("google_project_iam_member"):
        role = block.body["role"]
        assert role == "${each.value}" or _ROLE.fullmatch(role), f"{block.address}: role {role!r}"
        granted |= set(_ROLE.findall(block.text))
        assert "google_service_account.worker" in _references(block.body["member"])
    assert granted == ALLOWED_PROJECT_ROLES


def test_firestore_grant_is_confined_to_the_database() -> None:
    (block,) = [
        b for b in _resources("google_project_iam_member") if "roles/datastore.user" in b.text
    ]
    (condition,) = block.body["condition"]
    assert "google_firestore_database.memory.name" in condition["expression"]


def test_worker_roles_are_exactly_the_pinned_set() -> None:
    granted: set[str] = set()
    for block in _blocks():
        if block.type.endswith("_iam_member") and "google_service_account.worker" in _references(
            block.body["member"]
        ):
            granted |= set(_ROLE.findall(block.text))
    assert granted == WORKER_ROLES


def test_call_journal_adds_no_grant() -> None:
    """The journal rides on the one conditioned datastore.user grant, whose scope is unchanged."""
    datastore = [
        b for b in _blocks() if any(r.startswith("roles/datastore.") for r in _ROLE.findall(b.text))
    ]
    assert [(b.type, b.body["role"]) for b in datastore] == [
        ("google_project_iam_member", "roles/datastore.user")
    ]
    (condition,) = datastore[0].body["condition"]
    assert condition["expression"] == FIRESTORE_CONDITION
    for field in _resources("google_firestore_field"):
        assert field.body["database"] == "${google_firestore_database.memory.name}"
    for block in _blocks():
        if "_iam_" in block.type:
            assert "call_journal" not in block.text, block.address
            assert not any(
                r.startswith("google_firestore_field.") for r in _references(block.text)
            ), block.address


# role -> (the only resource type that may grant it, its target argument, job parameters naming
# the targets). Targets are read from the job's parameters, so IAM follows what the job uses.
_SCOPED_ROLES = {
    "roles/pubsub.subscriber": (
        "google_pubsub_subscription_iam_member",
        "subscription",
        ["input_subscription"],
    ),
    "roles/pubsub.viewer": (
        "google_pubsub_subscription_iam_member",
        "subscription",
        ["input_subscription"],
    ),
    "roles/pubsub.publisher": (
        "google_pubsub_topic_iam_member",
        "topic",
        ["output_topic", "errors_topic"],
    ),
}


@pytest.mark.parametrize("role", sorted(_SCOPED_ROLES))
def test_pubsub_role_is_granted_only_on_the_pipeline_resources(role: str) -> None:
    rtype, argument, parameters = _SCOPED_ROLES[role]
    grants = [b for b in _blocks() if role in _ROLE.findall(b.text)]
    assert {b.type for b in grants} == {rtype}
    targets = {t for b in grants for t in _references(b.body[argument])}
    assert targets == {_parameter_target(p) for p in parameters}


@pytest.mark.parametrize(
    ("role", "rtype", "argument", "target"),
    [
        (
            "roles/storage.objectAdmin",
            "google_storage_bucket_iam_member",
            "bucket",
            "google_storage_bucket.staging",
        ),
        (
            "roles/artifactregistry.reader",
            "google_artifact_registry_repository_iam_member",
            "repository",
            "google_artifact_registry_repository.templates",
        ),
    ],
)
def test_storage_roles_are_granted_only_on_their_resource(
    role: str, rtype: str, argument: str, target: str
) -> None:
    grants = [b for b in _blocks() if role in _ROLE.findall(b.text)]
    assert [b.type for b in grants] == [rtype]
    assert _references(grants[0].body[argument]) == {target}


def test_job_runs_as_the_dedicated_worker() -> None:
    job = _one("google_dataflow_flex_template_job").body
    assert _references(job["service_account_email"]) == {"google_service_account.worker"}


# ---------------------------------------------------------------------------
# The model API key: a secret the worker alone may read, whose value Terraform never holds
# ---------------------------------------------------------------------------


def test_model_api_key_secret_is_optional_and_off_by_default() -> None:
    variable = _variables()["model_api_key_secret_id"]
    assert variable["default"] is None and variable["type"] == "string"
    assert _locals()["model_api_key_secret_enabled"] == "${var.model_api_key_secret_id != null}"
    body = _one("google_secret_manager_secret").body
    assert body["count"] == f"${{{SECRET_ENABLED} ? 1 : 0}}"
    assert body["secret_id"] == "${var.model_api_key_secret_id}"
    assert body["project"] == "${var.project_id}"


def test_no_secret_version_is_managed_so_the_key_never_enters_the_state() -> None:
    """The user adds the version out of band; Terraform state would hold its payload in clear."""
    versions = [b.address for b in _blocks() if "secret_manager_secret_version" in b.type]
    assert versions == []
    assert "secret_data" not in _module_text_without_variables()


def test_secret_accessor_is_granted_to_the_worker_on_the_secret_only() -> None:
    """Least privilege: one member binding on the secret resource, never on the project."""
    grants = [b for b in _blocks() if SECRET_ACCESSOR in _ROLE.findall(b.text)]
    assert [b.type for b in grants] == ["google_secret_manager_secret_iam_member"]
    body = grants[0].body
    assert body["role"] == SECRET_ACCESSOR
    assert _references(body["secret_id"]) == {SECRET}
    assert _references(body["project"]) == {SECRET}
    assert _references(body["member"]) == {"google_service_account.worker"}
    assert body["count"] == f"${{{SECRET_ENABLED} ? 1 : 0}}"
    for block in _resources("google_project_iam_member"):
        assert "secretmanager" not in block.text, block.address


def test_secret_manager_api_is_enabled_exactly_when_the_secret_exists() -> None:
    for_each = _one("google_project_service").body["for_each"]
    assert f'{SECRET_ENABLED} ? ["secretmanager.googleapis.com"] : []' in for_each
    assert "google_project_service.enabled" in _references(
        json.dumps(_one("google_secret_manager_secret").body["depends_on"]))


def test_secret_is_replicated_in_the_region_and_takes_the_cmek_key() -> None:
    (replication,) = _one("google_secret_manager_secret").body["replication"]
    assert "auto" not in replication, "automatic replication needs a global CMEK key"
    (user_managed,) = replication["user_managed"]
    (replica,) = user_managed["replicas"]
    assert replica["location"] == "${var.region}"
    (dynamic,) = replica["dynamic"]
    spec = dynamic["customer_managed_encryption"]
    assert spec["for_each"] == "${local.cmek_enabled ? [var.kms_key_name] : []}"
    assert spec["content"] == [{"kms_key_name": "${customer_managed_encryption.value}"}]


def test_secret_manager_agent_gets_the_cmek_key_only_with_cmek_and_the_secret() -> None:
    condition = f"${{local.cmek_enabled && {SECRET_ENABLED} ? 1 : 0}}"
    (identity,) = [b for b in _resources("google_project_service_identity")
                   if b.body["service"] == "secretmanager.googleapis.com"]
    (grant,) = [b for b in _resources("google_kms_crypto_key_iam_member")
                if "google_project_service_identity.secret_manager" in _references(
                    b.body["member"])]
    assert identity.body["count"] == grant.body["count"] == condition
    assert grant.body["crypto_key_id"] == "${var.kms_key_name}"
    assert grant.body["role"] == "roles/cloudkms.cryptoKeyEncrypterDecrypter"
    depends_on = json.dumps(_one("google_secret_manager_secret").body["depends_on"])
    assert grant.address in _references(depends_on)


def test_secret_output_is_the_version_prefix_the_flag_takes() -> None:
    """`<output><version>` is what --model_api_key_secret takes: projects/P/secrets/S/versions/V."""
    from beam_agents.model._config import API_KEY_SECRET  # noqa: PLC0415

    value = _outputs()["model_api_key_secret_version_prefix"]["value"]
    assert value == (f'${{{SECRET_ENABLED} ? "${{{SECRET}[0].id}}/versions/" : null}}')
    # The provider's id of a secret is projects/{{project}}/secrets/{{secret_id}}, so the secret
    # ids the variable accepts must be the ones the flag accepts.
    (segment,) = re.findall(r"/secrets/(.+?)/versions/", API_KEY_SECRET.pattern)
    (validation,) = _variables()["model_api_key_secret_id"]["validation"]
    assert f'"^{segment}$"' in validation["condition"]


# ---------------------------------------------------------------------------
# Pub/Sub: nothing published is lost (DESIGN invariant 8)
# ---------------------------------------------------------------------------


def test_every_topic_has_a_subscription() -> None:
    subscribed = {
        t for s in _resources("google_pubsub_subscription") for t in _references(s.body["topic"])
    }
    topics = {b.address for b in _resources("google_pubsub_topic")}
    assert topics
    assert topics - subscribed == set()


@pytest.mark.parametrize("rtype", ["google_pubsub_topic", "google_pubsub_subscription"])
def test_retention_is_stated(rtype: str) -> None:
    for block in _resources(rtype):
        assert block.body.get("message_retention_duration") == "${var.message_retention_duration}"


def test_subscriptions_never_expire() -> None:
    for block in _resources("google_pubsub_subscription"):
        assert block.body["expiration_policy"] == [{"ttl": ""}], block.address


def test_errors_subscription_retains_acked_messages_for_redrive() -> None:
    errors_topic = _parameter_target("errors_topic")
    (subscription,) = [
        s
        for s in _resources("google_pubsub_subscription")
        if _references(s.body["topic"]) == {errors_topic}
    ]
    assert subscription.body["retain_acked_messages"] is True


def test_job_reads_a_subscription_and_writes_topics() -> None:
    assert _parameter_target("input_subscription").startswith("google_pubsub_subscription.")
    assert _parameter_target("output_topic").startswith("google_pubsub_topic.")
    assert _parameter_target("errors_topic").startswith("google_pubsub_topic.")
    assert _parameter_target("output_topic") != _parameter_target("errors_topic")


# ---------------------------------------------------------------------------
# Firestore, bucket, repository, APIs
# ---------------------------------------------------------------------------


def test_firestore_database_is_native_with_pitr_and_delete_protection() -> None:
    body = _one("google_firestore_database").body
    assert body["type"] == "FIRESTORE_NATIVE"
    assert body["point_in_time_recovery_enablement"] == "POINT_IN_TIME_RECOVERY_ENABLED"
    assert body["delete_protection_state"] == "DELETE_PROTECTION_ENABLED"
    assert _variables()["firestore_database_id"]["default"] == "beam-agents"


def _journal_ttl_field() -> Block:
    (block,) = [b for b in _resources("google_firestore_field") if "ttl_config" in b.body]
    return block


def test_call_journal_collection_variable_defaults_and_is_validated_like_the_store_one() -> None:
    variables = _variables()
    journal = variables["call_journal_collection"]
    assert journal["default"] == "beam_agents_calls"
    assert journal["type"] == "string"
    conditions = [
        v["condition"].replace("var.firestore_collection", "var.call_journal_collection")
        for v in variables["firestore_collection"]["validation"]
    ]
    assert [v["condition"] for v in journal["validation"]] == conditions


def test_call_journal_ttl_policy_is_on_expire_at_of_the_journal_collection() -> None:
    body = _journal_ttl_field().body
    assert body["ttl_config"] == [{}]
    assert body["field"] == JOURNAL_TTL_FIELD
    assert body["collection"] == "${var.call_journal_collection}"
    assert body["database"] == "${google_firestore_database.memory.name}"
    assert body["project"] == "${google_firestore_database.memory.project}"


def test_call_journal_collection_differs_from_the_store_collection() -> None:
    (lifecycle,) = _journal_ttl_field().body["lifecycle"]
    conditions = [p["condition"] for p in lifecycle["precondition"]]
    assert "${var.call_journal_collection != var.firestore_collection}" in conditions


def test_call_journal_field_configs_only_disable_indexes() -> None:
    """Only the journal's unqueried fields are configured, and only to drop their indexes."""
    fields = {b.body["field"]: b for b in _resources("google_firestore_field")}
    assert len(fields) == len(_resources("google_firestore_field")), "a field is configured twice"
    assert set(fields) == JOURNAL_UNINDEXED_FIELDS
    for block in fields.values():
        assert block.body["index_config"] == [{}], block.address
        assert block.body["collection"] == "${var.call_journal_collection}", block.address
        assert block.body["database"] == "${google_firestore_database.memory.name}", block.address
        assert block.body["project"] == "${google_firestore_database.memory.project}", block.address
    assert "ttl_config" not in fields["response"].body


def test_call_journal_output_and_job_parameters_name_the_ttl_collection() -> None:
    ttl_field = _journal_ttl_field().address
    assert _references(_outputs()["call_journal_collection"]["value"]) == {ttl_field}
    assert _parameter_target("call_journal_collection") == ttl_field
    assert _job_parameters()["call_journal"] == "firestore"
    # The journal reuses the long-term store's project and database parameters.
    assert _parameter_target("firestore_database") == "google_firestore_database.memory"
    assert _parameter_target("firestore_project") == "google_firestore_database.memory"


def test_bucket_is_private_versioned_and_expires_temp_files() -> None:
    body = _one("google_storage_bucket").body
    assert body["uniform_bucket_level_access"] is True
    assert body["versioning"] == [{"enabled": True}]
    assert body["public_access_prevention"] == "enforced"
    assert body["force_destroy"] == "${var.force_destroy}"
    assert _variables()["force_destroy"]["default"] is False
    temp_rules = [
        rule
        for rule in body["lifecycle_rule"]
        if "temp/" in rule["condition"][0].get("matches_prefix", [])
    ]
    assert [rule["action"] for rule in temp_rules] == [[{"type": "Delete"}]]


def test_repository_holds_docker_images() -> None:
    assert _one("google_artifact_registry_repository").body["format"] == "DOCKER"


def test_required_apis_are_enabled_and_survive_destroy() -> None:
    block = _one("google_project_service")
    enabled = set(re.findall(r"[a-z]+\.googleapis\.com", block.body["for_each"]))
    assert REQUIRED_APIS - enabled == set()
    assert block.body["disable_on_destroy"] is False


@pytest.mark.parametrize("rtype", sorted(LABELED_TYPES))
def test_labels_are_applied(rtype: str) -> None:
    blocks = _resources(rtype)
    assert blocks, f"no {rtype} in the module"
    for block in blocks:
        assert "var.labels" in _expand_locals(block.body.get("labels", "")), block.address


# ---------------------------------------------------------------------------
# Optional CMEK: one nullable key, applied everywhere it can be
# ---------------------------------------------------------------------------


def test_kms_key_defaults_to_google_managed() -> None:
    assert _variables()["kms_key_name"]["default"] is None


@pytest.mark.parametrize(
    "rtype",
    [
        "google_pubsub_topic",
        "google_artifact_registry_repository",
        "google_dataflow_flex_template_job",
    ],
)
def test_cmek_argument_is_the_variable(rtype: str) -> None:
    for block in _resources(rtype):
        assert block.body["kms_key_name"] == "${var.kms_key_name}", block.address


@pytest.mark.parametrize(
    ("rtype", "dynamic_block", "key_argument"),
    [
        ("google_storage_bucket", "encryption", "default_kms_key_name"),
        ("google_firestore_database", "cmek_config", "kms_key_name"),
    ],
)
def test_cmek_block_is_absent_without_a_key(
    rtype: str, dynamic_block: str, key_argument: str
) -> None:
    dynamics = {name: spec for d in _one(rtype).body["dynamic"] for name, spec in d.items()}
    spec = dynamics[dynamic_block]
    assert re.search(r"cmek_enabled \? \[var\.kms_key_name\] : \[\]", spec["for_each"])
    assert spec["content"][0][key_argument] == f"${{{dynamic_block}.value}}"
    assert _locals()["cmek_enabled"] == "${var.kms_key_name != null}"


# ---------------------------------------------------------------------------
# The optional job
# ---------------------------------------------------------------------------


def test_job_is_optional_and_off_by_default() -> None:
    assert _one("google_dataflow_flex_template_job").body["count"] == "${var.create_job ? 1 : 0}"
    assert _variables()["create_job"]["default"] is False


def test_job_parameter_names_match_the_flex_template() -> None:
    assert set(_job_parameters()) == FLEX_TEMPLATE_PARAMETERS


def test_job_parameters_give_the_pipeline_a_config_it_accepts() -> None:
    """The provider the variable allows gets every setting it needs, and the journal is on."""
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    from beam_agents.beam import agent_config_from_options  # noqa: PLC0415

    samples = {"var.agent": "examples.support_agent:agent", "var.model_id": "gemini-2.5-flash",
               "local.model_location": "us-central1", "var.project_id": "my-project"}
    journal_collection = _variables()["call_journal_collection"]["default"]
    journal_reference = _job_parameters()["call_journal_collection"].removeprefix("${")
    samples[journal_reference.removesuffix("}")] = journal_collection
    condition = _variables()["model_provider"]["validation"][0]["condition"]
    providers = re.findall(r'"(\w+)"', condition)
    assert providers == ["gemini"]
    for provider in providers:
        flags = []
        for name, expression in _job_parameters().items():
            value = provider if name == "model_provider" else expression
            for reference, sample in samples.items():
                value = value.replace("${" + reference + "}", sample)
            flags.append(f"--{name}={value if '${' not in value else 'x'}")
        config = agent_config_from_options(PipelineOptions(flags))
        assert config.model.provider == provider
        assert config.call_journal is not None
        assert config.call_journal.collection == journal_collection


def test_job_is_streaming_and_stages_in_the_bucket() -> None:
    job = _one("google_dataflow_flex_template_job").body
    assert job["enable_streaming_engine"] is True
    assert "google_storage_bucket.staging" in _references(job["temp_location"])
    assert "google_storage_bucket.staging" in _references(job["staging_location"])
    assert "var.template_spec_gcs_path" in _expand_locals(job["container_spec_gcs_path"])


def test_checkov_skips_give_a_reason() -> None:
    for path in sorted(TERRAFORM_DIR.glob("*.tf")):
        for match in re.finditer(r"checkov:skip=([A-Z0-9_]+)(?::(.*))?", path.read_text()):
            reason = (match.group(2) or "").strip()
            assert len(reason) >= 20, f"{path.name}: skip of {match.group(1)} needs a real reason"


def test_readme_documents_every_input_and_output() -> None:
    readme = (TERRAFORM_DIR / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", readme, flags=re.M))
    assert set(_variables()) | set(_outputs()) <= documented
