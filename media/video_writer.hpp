#pragma once
// Writes BGR frames into a video file with FFmpeg's libavcodec/libavformat: H.264 when an encoder for it opens
// (libx264 first, then any other H.264 encoder libavcodec has), else MPEG-4 part 2 (logged), in mp4, mkv or avi.
// Each frame keeps its own time stamp (variable frame rates stay as they are); a stamp that does not advance
// is moved one frame period (1 / fallback_fps) past the one before. Optionally a file's audio is copied along.
#include <cstdint>
#include <memory>
#include <string>

namespace sluice {

enum class VideoContainer { mp4, mkv, avi };
enum class VideoEncoding { automatic, h264, mpeg4 };  // automatic: h264, else mpeg4; h264: h264 or fail

struct VideoWriterOptions {
  VideoContainer container = VideoContainer::mp4;
  VideoEncoding codec = VideoEncoding::automatic;
  double fallback_fps = 25;       // the period of frames whose stamps do not advance, and the rate hint
  int quality = 23;               // h264: CRF (0 = lossless for libx264); mpeg4: derived qscale
  // A file whose first audio stream is copied (packets as they are, no re-encoding) alongside the frames, on
  // the same clock as the frames' stamps (the file's own): from the first frame's stamp to the last frame's
  // end. Empty: no audio. Without an audio stream, or one the container cannot hold, there is none (logged);
  // a failure while copying ends the audio, never the video.
  std::string audio_from;
};

class VideoWriter {
 public:
  // Opens `path` (the container is `options.container`, whatever the name ends with) for width x height BGR
  // frames. Odd sizes are padded to even ones (4:2:0 needs them) by repeating the last column/row.
  // Throws std::runtime_error naming the path and FFmpeg's reason.
  VideoWriter(const std::string& path, int width, int height, const VideoWriterOptions& options);
  ~VideoWriter();
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  // One frame: width*height*3 bytes of BGR, rows packed; pts_ns in the source's timeline.
  void write(const std::uint8_t* bgr, std::int64_t pts_ns);
  // Flushes the encoder and writes the trailer; the file is complete once it returns. Throws on failure.
  void finish();
  // The encoder chosen ("libx264", "mpeg4", ...).
  const std::string& codec_name() const;
  bool has_audio() const;
  std::uint64_t frames() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace sluice
