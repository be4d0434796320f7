# ---------------------------------------------------------------------------
# Where
# ---------------------------------------------------------------------------

variable "project_id" {
  description = "ID of the GCP project that hosts the pipeline, its topics, its Firestore database and its bucket."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a GCP project ID: 6-30 characters, lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen."
  }
}

variable "region" {
  description = "Region for the Dataflow job, the staging bucket, the Artifact Registry repository and (by default) Firestore, e.g. us-central1."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a GCP region such as us-central1 or europe-west4 (not a zone)."
  }
}

variable "name_prefix" {
  description = "Prefix for the names of the topics, subscriptions, service account and default bucket name."
  type        = string
  default     = "beam-agents"

  validation {
    # The service account ID "<prefix>-worker" must fit in 30 characters.
    condition     = can(regex("^[a-z][a-z0-9-]{1,21}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3-23 characters of lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit."
  }
}

variable "labels" {
  description = "Labels added to every resource that supports labels (merged over the module's own app/managed-by labels)."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for key, value in var.labels :
      can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))
    ])
    error_message = "labels keys must match ^[a-z][a-z0-9_-]{0,62}$ and values ^[a-z0-9_-]{0,63}$ (GCP label rules)."
  }
}

variable "kms_key_name" {
  description = "Optional Cloud KMS key (projects/P/locations/L/keyRings/R/cryptoKeys/K) for CMEK on the bucket, topics, Artifact Registry repository, Firestore database and job. null uses Google-managed keys. The key's location must match the region (and the Firestore location)."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_name == null ? true : can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be null or a full key name: projects/P/locations/L/keyRings/R/cryptoKeys/K."
  }
}

# ---------------------------------------------------------------------------
# Firestore (long-term memory store and model-call journal)
# ---------------------------------------------------------------------------

variable "firestore_database_id" {
  description = "ID of the Firestore database that holds long-term memory records."
  type        = string
  default     = "beam-agents"

  validation {
    condition     = var.firestore_database_id == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.firestore_database_id))
    error_message = "firestore_database_id must be \"(default)\" or 4-63 characters of lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit."
  }
}

variable "firestore_location" {
  description = "Firestore location (a region such as us-central1, or a multi-region such as nam5/eur3). null uses var.region."
  type        = string
  default     = null

  validation {
    condition     = var.firestore_location == null ? true : can(regex("^([a-z]+-[a-z]+[0-9]+|nam[0-9]+|eur[0-9]+)$", var.firestore_location))
    error_message = "firestore_location must be null, a region (us-central1) or a Firestore multi-region (nam5, eur3)."
  }
}

variable "firestore_collection" {
  description = "Firestore collection the pipeline writes long-term memory records to (passed to the job as firestore_collection)."
  type        = string
  default     = "beam_agents"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,100}$", var.firestore_collection)) && !can(regex("^__.*__$", var.firestore_collection))
    error_message = "firestore_collection must be 1-100 characters of letters, digits, underscores and hyphens, and must not match __.*__ (reserved by Firestore)."
  }
}

variable "call_journal_collection" {
  description = "Firestore collection, in the same database, that holds the model-call journal: one document per paid model call, deleted by a TTL policy on its expire_at field (passed to the job as call_journal_collection). Must differ from firestore_collection."
  type        = string
  default     = "beam_agents_calls"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,100}$", var.call_journal_collection)) && !can(regex("^__.*__$", var.call_journal_collection))
    error_message = "call_journal_collection must be 1-100 characters of letters, digits, underscores and hyphens, and must not match __.*__ (reserved by Firestore)."
  }
}

# ---------------------------------------------------------------------------
# Pub/Sub (input events, intents, dead letters)
# ---------------------------------------------------------------------------

variable "message_retention_duration" {
  description = "How long topics and subscriptions retain messages, in seconds with an \"s\" suffix (600s-2678400s). The errors subscription also keeps acknowledged messages for this long so they can be redriven."
  type        = string
  default     = "604800s"

  validation {
    condition = (
      can(regex("^[0-9]+s$", var.message_retention_duration))
      && try(tonumber(trimsuffix(var.message_retention_duration, "s")) >= 600, false)
      && try(tonumber(trimsuffix(var.message_retention_duration, "s")) <= 2678400, false)
    )
    error_message = "message_retention_duration must be a number of seconds with an \"s\" suffix, between 600s (10 minutes) and 2678400s (31 days)."
  }
}

# ---------------------------------------------------------------------------
# Staging bucket
# ---------------------------------------------------------------------------

variable "staging_bucket_name" {
  description = "Name of the staging bucket (Dataflow temp/staging files and the flex template spec). null uses \"<project_id>-<name_prefix>-staging\"."
  type        = string
  default     = null

  validation {
    condition     = var.staging_bucket_name == null ? true : can(regex("^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$", var.staging_bucket_name))
    error_message = "staging_bucket_name must be null or 3-63 characters of lowercase letters, digits, hyphens and underscores, starting and ending with a letter or digit (no dots)."
  }
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete the staging bucket while it still holds objects."
  type        = bool
  default     = false
}

variable "temp_object_max_age_days" {
  description = "Age in days after which objects under temp/ in the staging bucket are deleted."
  type        = number
  default     = 7

  validation {
    condition     = var.temp_object_max_age_days >= 1 && floor(var.temp_object_max_age_days) == var.temp_object_max_age_days
    error_message = "temp_object_max_age_days must be a whole number of days, at least 1."
  }
}

variable "noncurrent_object_max_age_days" {
  description = "Days a noncurrent (overwritten or deleted) object version is kept in the versioned staging bucket before it is deleted."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_object_max_age_days >= 1 && floor(var.noncurrent_object_max_age_days) == var.noncurrent_object_max_age_days
    error_message = "noncurrent_object_max_age_days must be a whole number of days, at least 1."
  }
}

# ---------------------------------------------------------------------------
# Flex template image and spec
# ---------------------------------------------------------------------------

variable "artifact_repository_id" {
  description = "ID of the Artifact Registry Docker repository that holds the flex template image."
  type        = string
  default     = "beam-agents"

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", var.artifact_repository_id))
    error_message = "artifact_repository_id must be 1-63 characters of lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit."
  }
}

variable "template_image_name" {
  description = "Image name of the flex template launcher image inside the repository."
  type        = string
  default     = "beam-agents-template"

  validation {
    condition     = can(regex("^[a-z0-9]+([._/-][a-z0-9]+)*$", var.template_image_name))
    error_message = "template_image_name must be a Docker image name: lowercase letters and digits separated by '.', '_', '-' or '/'."
  }
}

variable "template_image_tag" {
  description = "Tag of the flex template image. Prefer an immutable release tag (e.g. the package version) over \"latest\"."
  type        = string
  default     = "latest"

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.template_image_tag))
    error_message = "template_image_tag must be a Docker tag: up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'."
  }
}

variable "template_spec_gcs_path" {
  description = "gs:// path of the flex template spec JSON. null uses gs://<staging bucket>/templates/beam-agents.json. A spec outside the staging bucket must be readable by the worker service account."
  type        = string
  default     = null

  validation {
    condition     = var.template_spec_gcs_path == null ? true : can(regex("^gs://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]/.+\\.json$", var.template_spec_gcs_path))
    error_message = "template_spec_gcs_path must be null or a gs://BUCKET/PATH.json URL."
  }
}

# ---------------------------------------------------------------------------
# Optional Dataflow job
# ---------------------------------------------------------------------------

variable "create_job" {
  description = "Launch the streaming Dataflow flex template job. Leave false to provision only the infrastructure and launch with gcloud."
  type        = bool
  default     = false
}

variable "job_name" {
  description = "Name of the Dataflow job (used only when create_job is true)."
  type        = string
  default     = "beam-agents"

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", var.job_name))
    error_message = "job_name must be 1-63 characters of lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit."
  }
}

variable "agent" {
  description = "Agent the pipeline runs, as \"module.path:attribute\" (job parameter agent). Required when create_job is true."
  type        = string
  default     = null

  validation {
    condition     = var.agent == null ? true : can(regex("^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$", var.agent))
    error_message = "agent must be null or \"module.path:attribute\", e.g. examples.support_agent:agent."
  }
}

variable "model_provider" {
  description = "Model provider the agent calls (job parameter model_provider). The optional job wires Vertex AI, so only gemini is accepted here."
  type        = string
  default     = "gemini"

  validation {
    condition     = var.model_provider == "gemini"
    error_message = "model_provider must be gemini: the job this module creates calls Vertex AI (it grants roles/aiplatform.user and passes model_project/model_location). Run other providers with gcloud dataflow flex-template run."
  }
}

variable "model_id" {
  description = "Model ID passed to the provider (job parameter model_id), e.g. a Gemini model name. Required when create_job is true."
  type        = string
  default     = null

  validation {
    condition     = var.model_id == null ? true : length(trimspace(var.model_id)) > 0
    error_message = "model_id must be null or a non-empty string."
  }
}

variable "model_location" {
  description = "Vertex AI location for model calls (job parameter model_location). null uses var.region."
  type        = string
  default     = null

  validation {
    condition     = var.model_location == null ? true : can(regex("^(global|[a-z]+-[a-z]+[0-9]+)$", var.model_location))
    error_message = "model_location must be null, \"global\" or a region such as us-central1."
  }
}

variable "model_api_key_secret_id" {
  description = "ID of a Secret Manager secret to create for the model's API key (OpenAI-compatible servers, the Gemini API), readable by the worker service account alone; pass the model_api_key_secret_version_prefix output plus a version as --model_api_key_secret. The module never sets the value: add it with gcloud secrets versions add, so the key stays out of Terraform state. null creates no secret (Vertex AI needs no key)."
  type        = string
  default     = null

  validation {
    condition     = var.model_api_key_secret_id == null ? true : can(regex("^[A-Za-z0-9_-]{1,255}$", var.model_api_key_secret_id))
    error_message = "model_api_key_secret_id must be null or 1-255 letters, digits, underscores and hyphens."
  }
}

variable "max_workers" {
  description = "Upper bound for Dataflow autoscaling of the job."
  type        = number
  default     = 5

  validation {
    condition     = var.max_workers >= 1 && var.max_workers <= 1000 && floor(var.max_workers) == var.max_workers
    error_message = "max_workers must be a whole number between 1 and 1000."
  }
}

variable "machine_type" {
  description = "Compute Engine machine type for the job's workers. null lets Dataflow choose."
  type        = string
  default     = null

  validation {
    condition     = var.machine_type == null ? true : can(regex("^[a-z0-9]+-[a-z0-9-]+$", var.machine_type))
    error_message = "machine_type must be null or a machine type name such as n2-standard-4."
  }
}

variable "subnetwork" {
  description = "Subnetwork for the job's workers (regions/REGION/subnetworks/NAME or a full self link). Workers get private IPs only, so the subnetwork needs Private Google Access (and Cloud NAT to reach a non-Google model endpoint). null uses the default network."
  type        = string
  default     = null

  validation {
    condition     = var.subnetwork == null ? true : can(regex("(^|/)regions/[a-z]+-[a-z]+[0-9]+/subnetworks/[a-z]([-a-z0-9]*[a-z0-9])?$", var.subnetwork))
    error_message = "subnetwork must be null, regions/REGION/subnetworks/NAME, or a self link ending in that."
  }
}
