# Speech-to-text (services/scoring/speech_to_text.h): merging, PocketSphinx on corpus audio, and
# the OpenAI-compatible client against a local /v1/audio/transcriptions.
if(TARGET calleval_speech_to_text)
  # A faithful stand-in for POST /v1/audio/transcriptions on the loopback TestHttpServer.
  add_library(calleval_fake_transcriptions ${CMAKE_SOURCE_DIR}/tests/support/openai_transcriptions_route.cc)
  target_link_libraries(calleval_fake_transcriptions
    PUBLIC calleval_test_support absl::strings
    PRIVATE nlohmann_json::nlohmann_json)

  calleval_test(speech_to_text_test SOURCES speech_to_text_test.cc
    LIBS calleval_speech_to_text calleval_fake_transcriptions calleval_audio_decoder
         calleval_word_error_rate nlohmann_json::nlohmann_json absl::strings)
endif()

if(TARGET calleval_scoring_worker)
  # Recordings to transcripts in bounded pieces, with a recognizer that hears tone bursts.
  calleval_test(transcription_worker_test SOURCES transcription_worker_test.cc
    LIBS calleval_scoring_worker)
endif()
