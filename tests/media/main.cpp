// The media tests: the readers and sinks of the media library, registered once before any test runs.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "media/media.hpp"

int main(int argc, char** argv) {
  sluice::register_media();
  return Catch::Session().run(argc, argv);
}
