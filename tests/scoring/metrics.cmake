# Turns and the timeline-based standard metrics (services/scoring/turns.h, audio_metrics.h).
calleval_test(turns_test SOURCES turns_test.cc LIBS calleval_audio_metrics)
calleval_test(audio_metrics_test SOURCES audio_metrics_test.cc
              LIBS calleval_audio_metrics nlohmann_json::nlohmann_json)
# The corpus truth files that the contract test reproduces (skipped when they are absent).
target_compile_definitions(audio_metrics_test PRIVATE
                           CALLEVAL_CORPUS_DIR="${CMAKE_SOURCE_DIR}/../shared/corpus/calls")
