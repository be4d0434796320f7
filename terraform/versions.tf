terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.0"
    }
    # Only for google_dataflow_flex_template_job and google_project_service_identity,
    # which exist in the beta provider alone. Pinned to the same major as `google`.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "~> 6.0"
    }
  }
}
