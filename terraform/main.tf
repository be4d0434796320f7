# beam-agents deployment: the infrastructure a streaming beam-agents pipeline needs on GCP,
# and optionally the Dataflow flex template job itself.
#
#   producers -> input topic -> input subscription -> [Dataflow job] -> intents topic -> intents subscription
#                                                           |  \-> errors topic -> errors subscription (redrive)
#                                                           \-> Firestore database (long-term memory upserts)
#                                                           \-> Secret Manager (optional: the model's API key)
#
# No provider blocks: every resource names its project (and region/location) explicitly, so the
# module works as a root module and as a child module.

locals {
  # User labels win over the defaults.
  labels = merge({ app = "beam-agents", managed-by = "terraform" }, var.labels)

  cmek_enabled = var.kms_key_name != null

  model_api_key_secret_enabled = var.model_api_key_secret_id != null

  firestore_location = coalesce(var.firestore_location, var.region)
  model_location     = coalesce(var.model_location, var.region)

  staging_bucket_name    = coalesce(var.staging_bucket_name, "${var.project_id}-${var.name_prefix}-staging")
  staging_bucket_url     = "gs://${google_storage_bucket.staging.name}"
  temp_location          = "${local.staging_bucket_url}/temp"
  staging_location       = "${local.staging_bucket_url}/staging"
  template_spec_gcs_path = coalesce(var.template_spec_gcs_path, "${local.staging_bucket_url}/templates/beam-agents.json")
  template_image = join("", [
    "${google_artifact_registry_repository.templates.location}-docker.pkg.dev/",
    "${var.project_id}/${google_artifact_registry_repository.templates.repository_id}/",
    "${var.template_image_name}:${var.template_image_tag}",
  ])

  worker_member = "serviceAccount:${google_service_account.worker.email}"
}

# ---------------------------------------------------------------------------
# APIs
# ---------------------------------------------------------------------------

resource "google_project_service" "enabled" {
  for_each = toset(concat([
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "dataflow.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com", # the worker service account
    "pubsub.googleapis.com",
    "storage.googleapis.com",
  ], local.model_api_key_secret_enabled ? ["secretmanager.googleapis.com"] : []))

  project = var.project_id
  service = each.value

  # Other workloads in the project may use these APIs; destroying this stack must not break them.
  disable_on_destroy = false
}

# ---------------------------------------------------------------------------
# Optional CMEK: the Google service agents that encrypt on our behalf need the key.
# ---------------------------------------------------------------------------

data "google_project" "this" {
  count      = local.cmek_enabled ? 1 : 0
  project_id = var.project_id
}

# These agents may not exist until something creates them; the CMEK grants below need them.
resource "google_project_service_identity" "cmek" {
  provider = google-beta
  for_each = local.cmek_enabled ? toset(["artifactregistry", "firestore", "pubsub"]) : toset([])

  project = var.project_id
  service = "${each.key}.googleapis.com"

  depends_on = [google_project_service.enabled]
}

# Reading it creates the Cloud Storage service agent when the project has none yet.
data "google_storage_project_service_account" "gcs" {
  count   = local.cmek_enabled ? 1 : 0
  project = var.project_id

  depends_on = [google_project_service.enabled]
}

locals {
  # Evaluated only when CMEK is on (HCL discards errors from the branch not taken).
  cmek_key_users = local.cmek_enabled ? {
    artifactregistry = google_project_service_identity.cmek["artifactregistry"].email
    firestore        = google_project_service_identity.cmek["firestore"].email
    pubsub           = google_project_service_identity.cmek["pubsub"].email
    storage          = data.google_storage_project_service_account.gcs[0].email_address
    # The Dataflow job encrypts its state and the worker disks with the key.
    dataflow = "service-${data.google_project.this[0].number}@dataflow-service-producer-prod.iam.gserviceaccount.com"
    compute  = "service-${data.google_project.this[0].number}@compute-system.iam.gserviceaccount.com"
  } : {}
}

resource "google_kms_crypto_key_iam_member" "service_agents" {
  for_each = local.cmek_enabled ? toset(["artifactregistry", "compute", "dataflow", "firestore", "pubsub", "storage"]) : toset([])

  crypto_key_id = var.kms_key_name
  role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
  member        = "serviceAccount:${local.cmek_key_users[each.key]}"
}

# ---------------------------------------------------------------------------
# Firestore: the long-term memory store (DESIGN invariant 5: seq-guarded upserts)
# ---------------------------------------------------------------------------

resource "google_firestore_database" "memory" {
  project     = var.project_id
  name        = var.firestore_database_id
  location_id = local.firestore_location
  type        = "FIRESTORE_NATIVE"

  # Long-term memory is the one durable external effect of the pipeline: keep 7 days of
  # point-in-time history, and refuse deletion.
  point_in_time_recovery_enablement = "POINT_IN_TIME_RECOVERY_ENABLED"
  delete_protection_state           = "DELETE_PROTECTION_ENABLED"
  # terraform destroy only forgets the database; the data outlives the stack.
  deletion_policy = "ABANDON"

  dynamic "cmek_config" {
    for_each = local.cmek_enabled ? [var.kms_key_name] : []
    content {
      kms_key_name = cmek_config.value
    }
  }

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.service_agents]
}

# The model-call journal (invariant 9): one document per paid model call, in its own collection
# of the same database, so a replayed activation reads its responses instead of paying again.
# Entries carry `expire_at`; the TTL policy deletes them (typically within 24 hours of expiry).
# Firestore cannot delete a field configuration: destroy clears the TTL policy and the index
# exemptions, and the entries stay without expiring.
resource "google_firestore_field" "call_journal_expire_at" {
  project    = google_firestore_database.memory.project
  database   = google_firestore_database.memory.name
  collection = var.call_journal_collection
  field      = "expire_at"

  ttl_config {}

  # Nothing filters or orders on expire_at, and TTL deletion needs no index. An indexed field
  # whose values only increase would cap the collection at 500 writes per second.
  index_config {}

  lifecycle {
    precondition {
      condition     = var.call_journal_collection != var.firestore_collection
      error_message = "call_journal_collection must differ from firestore_collection: the journal needs a collection of its own."
    }
  }
}

# Nothing filters or orders on the response bytes (up to ~1 MB); indexing them would only add
# write latency and storage.
resource "google_firestore_field" "call_journal_response" {
  project    = google_firestore_database.memory.project
  database   = google_firestore_database.memory.name
  collection = var.call_journal_collection
  field      = "response"

  index_config {}
}

# A key too long to query by (over 749 bytes) is stored whole in `entity_key` and found by
# `entity_key_digest`; reads only compare it. Indexing up to ~1 MB of key bytes would only add
# write latency and storage.
resource "google_firestore_field" "call_journal_entity_key" {
  project    = google_firestore_database.memory.project
  database   = google_firestore_database.memory.name
  collection = var.call_journal_collection
  field      = "entity_key"

  index_config {}
}

# ---------------------------------------------------------------------------
# Optional: the model's API key (OpenAI-compatible servers, the Gemini API; Vertex AI needs none)
# ---------------------------------------------------------------------------

# Only the secret: its value is added out of band (gcloud secrets versions add), so the key never
# enters Terraform's plan or state. Workers read it at setup through --model_api_key_secret
# (the model_api_key_secret_version_prefix output plus a version), never through the job graph.
resource "google_secret_manager_secret" "model_api_key" {
  count = local.model_api_key_secret_enabled ? 1 : 0

  project   = var.project_id
  secret_id = var.model_api_key_secret_id
  labels    = local.labels

  # One replica, in the pipeline's region like the rest of the module's data, encrypted with the
  # module's key when CMEK is on (a user-managed replica takes a regional key; automatic
  # replication would need a global one).
  replication {
    user_managed {
      replicas {
        location = var.region

        dynamic "customer_managed_encryption" {
          for_each = local.cmek_enabled ? [var.kms_key_name] : []
          content {
            kms_key_name = customer_managed_encryption.value
          }
        }
      }
    }
  }

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.secret_manager_agent]
}

# Secret Manager's service agent encrypts the replica with the CMEK key.
resource "google_project_service_identity" "secret_manager" {
  provider = google-beta
  count    = local.cmek_enabled && local.model_api_key_secret_enabled ? 1 : 0

  project = var.project_id
  service = "secretmanager.googleapis.com"

  depends_on = [google_project_service.enabled]
}

resource "google_kms_crypto_key_iam_member" "secret_manager_agent" {
  count = local.cmek_enabled && local.model_api_key_secret_enabled ? 1 : 0

  crypto_key_id = var.kms_key_name
  role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
  member        = "serviceAccount:${google_project_service_identity.secret_manager[0].email}"
}

# ---------------------------------------------------------------------------
# Pub/Sub: every topic has a subscription, so nothing published is lost (invariant 8).
# ---------------------------------------------------------------------------

resource "google_pubsub_topic" "input" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-events"
  labels                     = local.labels
  kms_key_name               = var.kms_key_name
  message_retention_duration = var.message_retention_duration

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.service_agents]
}

resource "google_pubsub_topic" "intents" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-intents"
  labels                     = local.labels
  kms_key_name               = var.kms_key_name
  message_retention_duration = var.message_retention_duration

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.service_agents]
}

# Dead letters: one ErrorRecord per failed activation, carrying the original event bytes.
resource "google_pubsub_topic" "errors" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-errors"
  labels                     = local.labels
  kms_key_name               = var.kms_key_name
  message_retention_duration = var.message_retention_duration

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.service_agents]
}

# The subscription the pipeline reads.
resource "google_pubsub_subscription" "input" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-events-pipeline"
  topic                      = google_pubsub_topic.input.id
  labels                     = local.labels
  message_retention_duration = var.message_retention_duration

  # A stopped or drained pipeline must not lose its subscription (and its backlog).
  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "intents" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-intents-consumer"
  topic                      = google_pubsub_topic.intents.id
  labels                     = local.labels
  message_retention_duration = var.message_retention_duration

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "errors" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-errors-redrive"
  topic                      = google_pubsub_topic.errors.id
  labels                     = local.labels
  message_retention_duration = var.message_retention_duration
  # Inspecting a dead letter acknowledges it; keeping acked messages lets an operator seek back
  # and redrive them to the input topic within the retention window.
  retain_acked_messages = true

  expiration_policy {
    ttl = ""
  }
}

# ---------------------------------------------------------------------------
# Staging bucket: Dataflow temp/staging files and the flex template spec
# ---------------------------------------------------------------------------

resource "google_storage_bucket" "staging" {
  #checkov:skip=CKV_GCP_62:Access logs would need a second bucket; Cloud Audit Logs already record access to this bucket, which holds only Dataflow scratch files and the template spec.
  project  = var.project_id
  name     = local.staging_bucket_name
  location = var.region
  labels   = local.labels

  force_destroy               = var.force_destroy
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = true
  }

  # Dataflow leaves temp files behind; staging/ is kept because a running streaming job's
  # new workers still fetch their packages from it.
  lifecycle_rule {
    condition {
      age            = var.temp_object_max_age_days
      matches_prefix = ["temp/"]
    }
    action {
      type = "Delete"
    }
  }

  # Versioning turns every delete into a noncurrent version; expire those too.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_object_max_age_days
    }
    action {
      type = "Delete"
    }
  }

  dynamic "encryption" {
    for_each = local.cmek_enabled ? [var.kms_key_name] : []
    content {
      default_kms_key_name = encryption.value
    }
  }

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.service_agents]
}

# ---------------------------------------------------------------------------
# Artifact Registry: the flex template launcher image
# ---------------------------------------------------------------------------

resource "google_artifact_registry_repository" "templates" {
  project       = var.project_id
  location      = var.region
  repository_id = var.artifact_repository_id
  format        = "DOCKER"
  description   = "beam-agents Dataflow flex template images"
  labels        = local.labels
  kms_key_name  = var.kms_key_name

  depends_on = [google_project_service.enabled, google_kms_crypto_key_iam_member.service_agents]
}

# ---------------------------------------------------------------------------
# Dataflow worker identity and least-privilege IAM (additive *_iam_member only)
# ---------------------------------------------------------------------------

resource "google_service_account" "worker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-worker"
  display_name = "beam-agents Dataflow worker"
  description  = "Runs the beam-agents flex template launcher and Dataflow workers."

  depends_on = [google_project_service.enabled]
}

# Roles that have no narrower resource to bind to.
resource "google_project_iam_member" "worker" {
  for_each = toset(["roles/dataflow.worker", "roles/aiplatform.user"])

  project = var.project_id
  role    = each.value
  member  = local.worker_member
}

# Granted on the project, but the condition confines it to this one Firestore database.
resource "google_project_iam_member" "worker_firestore" {
  project = var.project_id
  role    = "roles/datastore.user"
  member  = local.worker_member

  condition {
    title       = "only-${google_firestore_database.memory.name}"
    description = "Limits the worker to the beam-agents Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.memory.name}\""
  }
}

resource "google_pubsub_subscription_iam_member" "worker_input_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.input.name
  role         = "roles/pubsub.subscriber"
  member       = local.worker_member
}

# Dataflow reads the subscription's metadata (ack deadline, topic) before pulling.
resource "google_pubsub_subscription_iam_member" "worker_input_viewer" {
  project      = var.project_id
  subscription = google_pubsub_subscription.input.name
  role         = "roles/pubsub.viewer"
  member       = local.worker_member
}

resource "google_pubsub_topic_iam_member" "worker_intents_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.intents.name
  role    = "roles/pubsub.publisher"
  member  = local.worker_member
}

resource "google_pubsub_topic_iam_member" "worker_errors_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.errors.name
  role    = "roles/pubsub.publisher"
  member  = local.worker_member
}

resource "google_storage_bucket_iam_member" "worker_staging" {
  bucket = google_storage_bucket.staging.name
  role   = "roles/storage.objectAdmin"
  member = local.worker_member
}

# The flex template launcher VM runs as the worker and pulls the template image.
resource "google_artifact_registry_repository_iam_member" "worker_reader" {
  project    = var.project_id
  location   = google_artifact_registry_repository.templates.location
  repository = google_artifact_registry_repository.templates.name
  role       = "roles/artifactregistry.reader"
  member     = local.worker_member
}

# Read access to the model's API key: on this one secret, never on the project.
resource "google_secret_manager_secret_iam_member" "worker_model_api_key" {
  count = local.model_api_key_secret_enabled ? 1 : 0

  project   = google_secret_manager_secret.model_api_key[0].project
  secret_id = google_secret_manager_secret.model_api_key[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = local.worker_member
}

# ---------------------------------------------------------------------------
# Optional: the streaming job
# ---------------------------------------------------------------------------

resource "google_dataflow_flex_template_job" "pipeline" {
  provider = google-beta
  count    = var.create_job ? 1 : 0

  project                 = var.project_id
  region                  = var.region
  name                    = var.job_name
  container_spec_gcs_path = local.template_spec_gcs_path
  service_account_email   = google_service_account.worker.email
  temp_location           = local.temp_location
  staging_location        = local.staging_location
  enable_streaming_engine = true
  ip_configuration        = "WORKER_IP_PRIVATE"
  subnetwork              = var.subnetwork
  max_workers             = var.max_workers
  machine_type            = var.machine_type
  kms_key_name            = var.kms_key_name
  labels                  = local.labels
  # Draining finishes in-flight activations, so nothing is lost on destroy (invariant 8).
  on_delete = "drain"

  # The names the flex template metadata declares (tests/terraform pins this set).
  parameters = {
    input_subscription   = google_pubsub_subscription.input.id
    output_topic         = google_pubsub_topic.intents.id
    errors_topic         = google_pubsub_topic.errors.id
    agent                = var.agent
    model_provider       = var.model_provider
    model_id             = var.model_id
    model_project        = var.project_id
    model_location       = local.model_location
    firestore_project    = google_firestore_database.memory.project
    firestore_database   = google_firestore_database.memory.name
    firestore_collection = var.firestore_collection
    # Without this the Firestore parameters are ignored and long-term memory is off.
    longterm_store = "firestore"
    # The journal shares firestore_project and firestore_database (invariant 9).
    call_journal            = "firestore"
    call_journal_collection = google_firestore_field.call_journal_expire_at.collection
  }

  lifecycle {
    precondition {
      condition     = var.agent != null && var.model_id != null
      error_message = "create_job = true needs agent and model_id to be set."
    }
  }

  depends_on = [
    google_project_iam_member.worker,
    google_project_iam_member.worker_firestore,
    google_pubsub_subscription_iam_member.worker_input_subscriber,
    google_pubsub_subscription_iam_member.worker_input_viewer,
    google_pubsub_topic_iam_member.worker_intents_publisher,
    google_pubsub_topic_iam_member.worker_errors_publisher,
    google_storage_bucket_iam_member.worker_staging,
    google_artifact_registry_repository_iam_member.worker_reader,
    google_kms_crypto_key_iam_member.service_agents,
  ]
}
