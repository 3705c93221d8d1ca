# Builds the bbmigrate CLI and ships it with the migrations (used by docker-compose.yml).
FROM swift:6.3-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libpq-dev pkg-config && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Tests ./Tests
RUN swift build -c release --product bbmigrate

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends libpq5 ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/.build/release/bbmigrate /usr/local/bin/bbmigrate
COPY --from=build /usr/lib/swift/linux/*.so* /usr/lib/
COPY Migrations /migrations
WORKDIR /
ENTRYPOINT ["bbmigrate"]
