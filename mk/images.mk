# Container images: simple-sandbox and simple-controller, tagged latest, the chart's
# appVersion and the package's version (the default SIMPLE_DEFAULT_IMAGE).
# Included from the top-level Makefile. BASE_IMAGE=... overrides the base image.

.PHONY: images images-sandbox images-controller images-services

images: ## Build the sandbox and controller images (no registry needed)
	bash docker/build-images.sh sandbox controller

images-sandbox: ## Build only simple-sandbox:latest
	bash docker/build-images.sh sandbox

images-controller: ## Build only simple-controller:latest
	bash docker/build-images.sh controller

images-services: ## Build simple-postgres:local, simple-s3:local, simple-haproxy:local (stand-ins for registry images)
	bash docker/build-service-images.sh postgres s3 haproxy
