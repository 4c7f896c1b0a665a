# Turns and the timeline-based standard metrics (services/scoring/turns.h, audio_metrics.h).
calleval_test(turns_test SOURCES turns_test.cc LIBS calleval_audio_metrics)
calleval_test(audio_metrics_test SOURCES audio_metrics_test.cc
              LIBS calleval_audio_metrics nlohmann_json::nlohmann_json)
