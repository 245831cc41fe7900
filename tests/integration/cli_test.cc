// placeholder: written by the integration-test work in progress
