# Everything the flex template parameters and the deploy commands need, in the form they take it.

output "input_subscription" {
  description = "Subscription the pipeline reads (projects/P/subscriptions/S): the input_subscription job parameter."
  value       = google_pubsub_subscription.input.id
}

output "input_topic" {
  description = "Topic producers publish AgentEvents to, and where redriven dead letters go (projects/P/topics/T)."
  value       = google_pubsub_topic.input.id
}

output "output_topic" {
  description = "Topic the pipeline publishes intents to (projects/P/topics/T): the output_topic job parameter."
  value       = google_pubsub_topic.intents.id
}

output "intents_subscription" {
  description = "Subscription for consumers of the intents topic (projects/P/subscriptions/S)."
  value       = google_pubsub_subscription.intents.id
}

output "errors_topic" {
  description = "Dead-letter topic for ErrorRecords (projects/P/topics/T): the errors_topic job parameter."
  value       = google_pubsub_topic.errors.id
}

output "errors_subscription" {
  description = "Subscription on the errors topic for inspection and redrive; it retains acknowledged messages (projects/P/subscriptions/S)."
  value       = google_pubsub_subscription.errors.id
}

output "firestore_project" {
  description = "Project of the Firestore database: the firestore_project job parameter."
  value       = google_firestore_database.memory.project
}

output "firestore_database" {
  description = "Firestore database ID: the firestore_database job parameter."
  value       = google_firestore_database.memory.name
}

output "firestore_collection" {
  description = "Firestore collection for long-term memory records: the firestore_collection job parameter."
  value       = var.firestore_collection
}

output "call_journal_collection" {
  description = "Firestore collection of the model-call journal, with its expire_at TTL policy in place: the call_journal_collection job parameter (with call_journal=firestore)."
  value       = google_firestore_field.call_journal_expire_at.collection
}

output "model_api_key_secret_version_prefix" {
  description = "projects/P/secrets/S/versions/ of the model API key secret, or null unless model_api_key_secret_id is set: append a version number (pin one; latest follows rotations as workers restart) and pass it as --model_api_key_secret."
  value       = local.model_api_key_secret_enabled ? "${google_secret_manager_secret.model_api_key[0].id}/versions/" : null
}

output "service_account_email" {
  description = "Email of the Dataflow worker service account (gcloud dataflow flex-template run --service-account-email)."
  value       = google_service_account.worker.email
}

output "staging_bucket" {
  description = "Staging bucket URL (gs://BUCKET)."
  value       = local.staging_bucket_url
}

output "temp_location" {
  description = "Dataflow temp location in the staging bucket (gs://BUCKET/temp)."
  value       = local.temp_location
}

output "template_image" {
  description = "Flex template image reference (REGION-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG) to build, push, and pass to gcloud dataflow flex-template build --image."
  value       = local.template_image
}

output "template_spec_gcs_path" {
  description = "gs:// path of the flex template spec JSON (gcloud dataflow flex-template build/run --template-file-gcs-location)."
  value       = local.template_spec_gcs_path
}

output "region" {
  description = "Region of the Dataflow job, the bucket and the Artifact Registry repository (gcloud --region)."
  value       = var.region
}

output "job_id" {
  description = "ID of the Dataflow job, or null unless create_job is true."
  value       = one(google_dataflow_flex_template_job.pipeline[*].job_id)
}
